#ifndef JOBCTL_CCRYPTO_SHIM_H
#define JOBCTL_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/err.h>

/// Whether `key` is an RSA key (EVP_PKEY_RSA is a macro of a macro, so it is compared here).
static inline int jobctl_evp_pkey_is_rsa(const EVP_PKEY *key) {
    return EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA;
}

/// A PEM passphrase callback that refuses: an encrypted key fails instead of prompting on a terminal.
static inline int jobctl_pem_no_passphrase(char *buffer, int size, int rwflag, void *userdata) {
    (void)buffer; (void)size; (void)rwflag; (void)userdata;
    return -1;
}

/// Reads a PEM private key (PKCS#8 or traditional) from memory without ever prompting for a passphrase.
static inline EVP_PKEY *jobctl_read_private_key_pem(const void *pem, int length) {
    BIO *bio = BIO_new_mem_buf(pem, length);
    if (bio == NULL) return NULL;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, jobctl_pem_no_passphrase, NULL);
    BIO_free(bio);
    return key;
}
#endif
