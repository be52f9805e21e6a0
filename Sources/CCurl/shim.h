#ifndef JOBCTL_CCURL_SHIM_H
#define JOBCTL_CCURL_SHIM_H
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

/* libcurl is loaded when the first HTTP exchange needs it (dlopen), not when jobctl starts: with its
   dependencies it is ~30 shared objects, whose mapping and relocation cost every command a few
   milliseconds, and a worker or command that moves no HTTP byte never needs them. Swift calls only
   the `jobctl_curl_*` wrappers below, which go through the pointers `jobctl_curl_load` resolved (the
   named ones load on first use); callers check that `jobctl_curl_load` returned NULL before any.

   Each list entry: return type, name, parameters, arguments. */
#define JOBCTL_CURL_FUNCTIONS(X) \
    X(CURLcode, curl_global_init, (long flags), (flags)) \
    X(const char *, curl_easy_strerror, (CURLcode code), (code)) \
    X(const char *, curl_multi_strerror, (CURLMcode code), (code)) \
    X(CURL *, curl_easy_init, (void), ()) \
    X(void, curl_easy_cleanup, (CURL *handle), (handle)) \
    X(CURLcode, curl_easy_pause, (CURL *handle, int bitmask), (handle, bitmask)) \
    X(struct curl_slist *, curl_slist_append, (struct curl_slist *list, const char *line), (list, line)) \
    X(void, curl_slist_free_all, (struct curl_slist *list), (list)) \
    X(CURLM *, curl_multi_init, (void), ()) \
    X(CURLMcode, curl_multi_cleanup, (CURLM *multi), (multi)) \
    X(CURLMcode, curl_multi_add_handle, (CURLM *multi, CURL *handle), (multi, handle)) \
    X(CURLMcode, curl_multi_remove_handle, (CURLM *multi, CURL *handle), (multi, handle)) \
    X(CURLMcode, curl_multi_perform, (CURLM *multi, int *running), (multi, running)) \
    X(CURLMcode, curl_multi_poll, (CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready), \
      (multi, extra, count, timeout_ms, ready)) \
    X(CURLMcode, curl_multi_wakeup, (CURLM *multi), (multi)) \
    X(CURLMsg *, curl_multi_info_read, (CURLM *multi, int *queued), (multi, queued))

struct jobctl_curl_api {
#define JOBCTL_CURL_POINTER(type, name, params, args) type (*name) params;
    JOBCTL_CURL_FUNCTIONS(JOBCTL_CURL_POINTER)
#undef JOBCTL_CURL_POINTER
    /* The variadic three, called with exactly one value after the option (see the wrappers below). */
    CURLcode (*curl_easy_setopt)(CURL *handle, CURLoption option, ...);
    CURLcode (*curl_easy_getinfo)(CURL *handle, CURLINFO info, ...);
    CURLMcode (*curl_multi_setopt)(CURLM *multi, CURLMoption option, ...);
    /* NULL once every pointer is set, else why libcurl could not be used. */
    const char *failure;
    char failure_text[256];
};

/* The one table (a function's static: Swift's importer emits those with the function, not statics at
   file scope). */
static inline struct jobctl_curl_api *jobctl_curl_table(void) {
    static struct jobctl_curl_api table;
    return &table;
}

static inline void jobctl_curl_resolve(void *library, void **slot, const char *name, struct jobctl_curl_api *api) {
    *slot = dlsym(library, name);
    if (*slot == NULL && api->failure == NULL) {
        snprintf(api->failure_text, sizeof api->failure_text, "libcurl.so.4 has no %s", name);
        api->failure = api->failure_text;
    }
}

static inline void jobctl_curl_load_once(void) {
    struct jobctl_curl_api *api = jobctl_curl_table();
    /* RTLD_LOCAL: its symbols stay out of the global scope (nothing else links against them). */
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(api->failure_text, sizeof api->failure_text, "%s", reason != NULL ? reason : "libcurl.so.4 could not be loaded");
        api->failure = api->failure_text;
        return;
    }
#define JOBCTL_CURL_RESOLVE(type, name, params, args) jobctl_curl_resolve(library, (void **)&api->name, #name, api);
    JOBCTL_CURL_FUNCTIONS(JOBCTL_CURL_RESOLVE)
#undef JOBCTL_CURL_RESOLVE
    jobctl_curl_resolve(library, (void **)&api->curl_easy_setopt, "curl_easy_setopt", api);
    jobctl_curl_resolve(library, (void **)&api->curl_easy_getinfo, "curl_easy_getinfo", api);
    jobctl_curl_resolve(library, (void **)&api->curl_multi_setopt, "curl_multi_setopt", api);
}

/* Loads libcurl once per process (any thread; later calls return at once). NULL when it is usable,
   else a sentence saying why not (the library missing, or a function missing from it). */
static inline const char *jobctl_curl_load(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, jobctl_curl_load_once);
    return jobctl_curl_table()->failure;
}

#define JOBCTL_CURL_WRAPPER(type, name, params, args) \
    static inline type jobctl_##name params { (void)jobctl_curl_load(); return jobctl_curl_table()->name args; }
JOBCTL_CURL_FUNCTIONS(JOBCTL_CURL_WRAPPER)
#undef JOBCTL_CURL_WRAPPER

/* curl_easy_setopt / curl_easy_getinfo / curl_multi_setopt are variadic: Swift cannot call them.
   These typed wrappers are the only way Swift code sets options (through the loaded pointers; each
   makes sure the table is filled, as the table is per translation unit). */
static inline CURLcode jobctl_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
typedef size_t (*jobctl_curl_data_callback)(char *buffer, size_t size, size_t count, void *context);
static inline CURLcode jobctl_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, jobctl_curl_data_callback value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, option, value);
}
typedef int (*jobctl_curl_xferinfo_callback)(void *context, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode jobctl_curl_easy_setopt_xferinfo_callback(CURL *handle, jobctl_curl_xferinfo_callback value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, value);
}
typedef int (*jobctl_curl_seek_callback)(void *context, curl_off_t offset, int origin);
static inline CURLcode jobctl_curl_easy_setopt_seek_callback(CURL *handle, jobctl_curl_seek_callback value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, value);
}
typedef int (*jobctl_curl_prereq_callback)(void *context, char *primary_ip, char *local_ip, int primary_port, int local_port);
static inline CURLcode jobctl_curl_easy_setopt_prereq_callback(CURL *handle, jobctl_curl_prereq_callback value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, CURLOPT_PREREQFUNCTION, value);
}
typedef int (*jobctl_curl_closesocket_callback)(void *context, curl_socket_t socket);
static inline CURLcode jobctl_curl_easy_setopt_closesocket_callback(CURL *handle, jobctl_curl_closesocket_callback value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_setopt(handle, CURLOPT_CLOSESOCKETFUNCTION, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_socket(CURL *handle, CURLINFO info, curl_socket_t *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_getinfo(handle, info, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_getinfo(handle, info, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_getinfo(handle, info, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_easy_getinfo(handle, info, value);
}
static inline CURLMcode jobctl_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    (void)jobctl_curl_load();
    return jobctl_curl_table()->curl_multi_setopt(multi, option, value);
}
#endif
