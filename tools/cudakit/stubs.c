/* stubs.c — link stand-ins for the GPU device machine, whose image has no libmicrohttpd and no
 * OpenBLAS: a plain-loop cblas_sgemm (every order/transpose form) and openblas_set_num_threads,
 * and MHD_* functions that refuse to start a daemon (`lmc serve` reports it cannot listen there).
 * Copied into the kit by make-kit.sh; never linked into a normal build. */
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <cblas.h>
#include <microhttpd.h>

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER o, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                 OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float *A,
                 OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *B, OPENBLAS_CONST blasint ldb,
                 OPENBLAS_CONST float beta, float *C, OPENBLAS_CONST blasint ldc) {
    for (blasint i = 0; i < M; i++)
        for (blasint j = 0; j < N; j++) {
            double s = 0;
            for (blasint k = 0; k < K; k++) {
                float a, b;
                if (o == CblasRowMajor) {
                    a = ta == CblasNoTrans ? A[(size_t)i * lda + k] : A[(size_t)k * lda + i];
                    b = tb == CblasNoTrans ? B[(size_t)k * ldb + j] : B[(size_t)j * ldb + k];
                } else {
                    a = ta == CblasNoTrans ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                    b = tb == CblasNoTrans ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                }
                s += (double)a * b;
            }
            float *c = o == CblasRowMajor ? &C[(size_t)i * ldc + j] : &C[(size_t)j * ldc + i];
            *c = (float)(alpha * s + (beta == 0 ? 0 : beta * *c));
        }
}

enum MHD_Result MHD_add_response_header(struct MHD_Response *r, const char *h, const char *c) { return MHD_NO; }
struct MHD_Response *MHD_create_response_from_buffer(size_t s, void *b, enum MHD_ResponseMemoryMode m) { return NULL; }
struct MHD_Response *MHD_create_response_from_callback(uint64_t s, size_t bs, MHD_ContentReaderCallback crc,
                                                       void *cls, MHD_ContentReaderFreeCallback f) { return NULL; }
void MHD_destroy_response(struct MHD_Response *r) {}
const union MHD_ConnectionInfo *MHD_get_connection_info(struct MHD_Connection *c, enum MHD_ConnectionInfoType t, ...) { return NULL; }
const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *d, enum MHD_DaemonInfoType t, ...) { return NULL; }
const char *MHD_lookup_connection_value(struct MHD_Connection *c, enum MHD_ValueKind k, const char *key) { return NULL; }
enum MHD_Result MHD_queue_response(struct MHD_Connection *c, unsigned int s, struct MHD_Response *r) { return MHD_NO; }
MHD_socket MHD_quiesce_daemon(struct MHD_Daemon *d) { return MHD_INVALID_SOCKET; }
struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc, void *apc_cls,
                                    MHD_AccessHandlerCallback dh, void *dh_cls, ...) { return NULL; }
void MHD_stop_daemon(struct MHD_Daemon *d) {}
void openblas_set_num_threads(int n) {}
