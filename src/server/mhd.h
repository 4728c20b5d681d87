/* mhd.h — libmicrohttpd, loaded at run time.
 *
 * The server calls libmicrohttpd through this table, filled by dlopen of
 * libmicrohttpd.so.12 on first use, so that binaries which never serve (and
 * builds that do not link -lmicrohttpd) carry no dependency on it. The table
 * is process-wide and read-only once loaded. Types and constants come from
 * <microhttpd.h> unchanged.
 */
#ifndef LMC_SERVER_MHD_H
#define LMC_SERVER_MHD_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "core/status.h"

typedef struct lmc_mhd_api {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_get_daemon_info) *get_daemon_info;
    __typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
    __typeof__(MHD_create_response_from_callback) *create_response_from_callback;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
    __typeof__(MHD_lookup_connection_value) *lookup_connection_value;
    __typeof__(MHD_get_connection_info) *get_connection_info;
} lmc_mhd_api;

/* The loaded table; LMC_ERR_UNSUPPORTED when the library cannot be found. */
lmc_status lmc_mhd_load(const lmc_mhd_api **out);

#endif
