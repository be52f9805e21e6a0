#ifndef JOBCTL_CCURL_SHIM_H
#define JOBCTL_CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt / curl_easy_getinfo / curl_multi_setopt are variadic: Swift cannot call them.
   These typed wrappers are the only way Swift code sets options. */
static inline CURLcode jobctl_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode jobctl_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
typedef size_t (*jobctl_curl_data_callback)(char *buffer, size_t size, size_t count, void *context);
static inline CURLcode jobctl_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, jobctl_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}
typedef int (*jobctl_curl_xferinfo_callback)(void *context, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode jobctl_curl_easy_setopt_xferinfo_callback(CURL *handle, jobctl_curl_xferinfo_callback value) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, value);
}
typedef int (*jobctl_curl_seek_callback)(void *context, curl_off_t offset, int origin);
static inline CURLcode jobctl_curl_easy_setopt_seek_callback(CURL *handle, jobctl_curl_seek_callback value) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode jobctl_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLMcode jobctl_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
#endif
