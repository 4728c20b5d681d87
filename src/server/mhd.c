/* mhd.c — dlopen of libmicrohttpd and its function table (see mhd.h).
 * Loaded once per process (pthread_once); the handle is never closed, the
 * table is read-only afterwards. Replace with direct calls if the build ever
 * links -lmicrohttpd: nothing else in the server depends on how it is loaded. */
#include "mhd.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static lmc_mhd_api api;
static lmc_status load_status = LMC_ERR_UNSUPPORTED;
static char load_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *sym(void *h, const char *name, int *missing) {
    void *p = dlsym(h, name);
    if (!p && !*missing) {
        *missing = 1;
        snprintf(load_error, sizeof load_error, "libmicrohttpd lacks %s", name);
    }
    return p;
}

static void load_once(void) {
    static const char *names[] = {"libmicrohttpd.so.12", "libmicrohttpd.so"};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof names / sizeof *names; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error, "cannot load libmicrohttpd (apt-get install libmicrohttpd12): %s",
                 dlerror());
        return;
    }
    int missing = 0;
    /* POSIX guarantees object and function pointers convert through dlsym. */
    *(void **)&api.start_daemon = sym(h, "MHD_start_daemon", &missing);
    *(void **)&api.stop_daemon = sym(h, "MHD_stop_daemon", &missing);
    *(void **)&api.get_daemon_info = sym(h, "MHD_get_daemon_info", &missing);
    *(void **)&api.create_response_from_buffer = sym(h, "MHD_create_response_from_buffer", &missing);
    *(void **)&api.create_response_from_callback = sym(h, "MHD_create_response_from_callback", &missing);
    *(void **)&api.add_response_header = sym(h, "MHD_add_response_header", &missing);
    *(void **)&api.queue_response = sym(h, "MHD_queue_response", &missing);
    *(void **)&api.destroy_response = sym(h, "MHD_destroy_response", &missing);
    *(void **)&api.lookup_connection_value = sym(h, "MHD_lookup_connection_value", &missing);
    *(void **)&api.get_connection_info = sym(h, "MHD_get_connection_info", &missing);
    if (missing) return;
    load_status = LMC_OK;
}

lmc_status lmc_mhd_load(const lmc_mhd_api **out) {
    pthread_once(&once, load_once);
    if (load_status < 0) return lmc_fail(load_status, "%s", load_error);
    *out = &api;
    return LMC_OK;
}
