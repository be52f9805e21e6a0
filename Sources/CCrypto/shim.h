#ifndef JOBCTL_CCRYPTO_SHIM_H
#define JOBCTL_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#endif
