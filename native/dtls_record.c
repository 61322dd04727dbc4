/*
 * DTLS 1.2 AEAD record protection over OpenSSL's EVP interface (see dtls_record.h).
 *
 * The OpenSSL functions are looked up once with dlsym in the running process instead of being
 * linked: Node exports its OpenSSL for addons, so they are there under Node, and an addon loaded
 * by a runtime without them still loads (its UDP plane works; the DTLS record layer reports
 * itself unavailable and JavaScript keeps every association).
 */
#define _GNU_SOURCE
#include "dtls_record.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

typedef EVP_CIPHER_CTX *(*ctx_new_fn)(void);
typedef void (*ctx_free_fn)(EVP_CIPHER_CTX *);
typedef int (*init_fn)(EVP_CIPHER_CTX *, const EVP_CIPHER *, ENGINE *, const unsigned char *,
                       const unsigned char *, int);
typedef int (*update_fn)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
typedef int (*final_fn)(EVP_CIPHER_CTX *, unsigned char *, int *);
typedef int (*ctrl_fn)(EVP_CIPHER_CTX *, int, int, void *);
typedef const EVP_CIPHER *(*cipher_fn)(void);

static struct {
  ctx_new_fn ctx_new;
  ctx_free_fn ctx_free;
  init_fn init;
  update_fn update;
  final_fn final;
  ctrl_fn ctrl;
  cipher_fn aes128gcm, aes256gcm, aes128ccm, aes256ccm, chacha;
} ossl;

static pthread_once_t ossl_once = PTHREAD_ONCE_INIT;
static int ossl_ok;
/* The first OpenSSL function that did not resolve, for the start-up line; NULL when all did. */
static const char *ossl_missing;

static void *sym(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL && ossl_missing == NULL) ossl_missing = name;
  return f;
}

static void ossl_load(void) {
  ossl.ctx_new = (ctx_new_fn)sym("EVP_CIPHER_CTX_new");
  ossl.ctx_free = (ctx_free_fn)sym("EVP_CIPHER_CTX_free");
  ossl.init = (init_fn)sym("EVP_CipherInit_ex");
  ossl.update = (update_fn)sym("EVP_CipherUpdate");
  ossl.final = (final_fn)sym("EVP_CipherFinal_ex");
  ossl.ctrl = (ctrl_fn)sym("EVP_CIPHER_CTX_ctrl");
  ossl.aes128gcm = (cipher_fn)sym("EVP_aes_128_gcm");
  ossl.aes256gcm = (cipher_fn)sym("EVP_aes_256_gcm");
  ossl.aes128ccm = (cipher_fn)sym("EVP_aes_128_ccm");
  ossl.aes256ccm = (cipher_fn)sym("EVP_aes_256_ccm");
  ossl.chacha = (cipher_fn)sym("EVP_chacha20_poly1305");
  ossl_ok = ossl.ctx_new && ossl.ctx_free && ossl.init && ossl.update && ossl.final && ossl.ctrl &&
            ossl.aes128gcm && ossl.aes256gcm && ossl.aes128ccm && ossl.aes256ccm && ossl.chacha;
}

int dtls_crypto_available(void) {
  pthread_once(&ossl_once, ossl_load);
  return ossl_ok;
}

const char *dtls_crypto_missing(void) {
  pthread_once(&ossl_once, ossl_load);
  return ossl_ok ? NULL : ossl_missing;
}

/* The suites of src/transports/dtls/suites.ts, same ids and parameters. */
static const dtls_suite_t SUITES[] = {
    {0x00a8, DTLS_MODE_GCM, 16, 4, 8, 16},    /* TLS_PSK_WITH_AES_128_GCM_SHA256 */
    {0x00a9, DTLS_MODE_GCM, 32, 4, 8, 16},    /* TLS_PSK_WITH_AES_256_GCM_SHA384 */
    {0xc0a4, DTLS_MODE_CCM, 16, 4, 8, 16},    /* TLS_PSK_WITH_AES_128_CCM */
    {0xc0a5, DTLS_MODE_CCM, 32, 4, 8, 16},    /* TLS_PSK_WITH_AES_256_CCM */
    {0xc0a8, DTLS_MODE_CCM, 16, 4, 8, 8},     /* TLS_PSK_WITH_AES_128_CCM_8 */
    {0xc0a9, DTLS_MODE_CCM, 32, 4, 8, 8},     /* TLS_PSK_WITH_AES_256_CCM_8 */
    {0xccab, DTLS_MODE_CHACHA, 32, 12, 0, 16} /* TLS_PSK_WITH_CHACHA20_POLY1305_SHA256 */
};

const dtls_suite_t *dtls_suite_find(uint16_t id) {
  for (size_t i = 0; i < sizeof(SUITES) / sizeof(SUITES[0]); i++)
    if (SUITES[i].id == id) return &SUITES[i];
  return NULL;
}

static const EVP_CIPHER *cipher_of(const dtls_suite_t *s) {
  switch (s->mode) {
    case DTLS_MODE_GCM:
      return s->key_len == 16 ? ossl.aes128gcm() : ossl.aes256gcm();
    case DTLS_MODE_CCM:
      return s->key_len == 16 ? ossl.aes128ccm() : ossl.aes256ccm();
    default:
      return ossl.chacha();
  }
}

int dtls_dir_init(dtls_dir_t *d, const dtls_suite_t *s, const uint8_t *key, const uint8_t *iv, int encrypt) {
  memset(d, 0, sizeof(*d));
  if (!dtls_crypto_available() || s == NULL) return -1;
  EVP_CIPHER_CTX *ctx = ossl.ctx_new();
  if (ctx == NULL) return -1;
  int enc = encrypt ? 1 : 0;
  int ok = ossl.init(ctx, cipher_of(s), NULL, NULL, NULL, enc) == 1;
  /* 12-byte nonces everywhere (for CCM that is L = 3); CCM also fixes its tag length up front. */
  if (ok) ok = ossl.ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL) == 1;
  if (ok && s->mode == DTLS_MODE_CCM) ok = ossl.ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, s->tag_len, NULL) == 1;
  if (ok) ok = ossl.init(ctx, NULL, NULL, key, NULL, enc) == 1;
  if (!ok) {
    ossl.ctx_free(ctx);
    return -1;
  }
  d->suite = s;
  d->ctx = ctx;
  d->encrypt = enc;
  memcpy(d->iv, iv, s->fixed_iv_len);
  return 0;
}

void dtls_dir_free(dtls_dir_t *d) {
  /* EVP_CIPHER_CTX_free wipes the key schedule; the implicit IV is wiped here. */
  if (d->ctx != NULL) ossl.ctx_free(d->ctx);
  d->ctx = NULL;
  d->suite = NULL;
  explicit_bzero(d->iv, sizeof(d->iv));
}

/* Nonce from the implicit IV and the record's epoch ‖ seq (`es`, 8 bytes) or explicit nonce. */
static void make_nonce(const dtls_dir_t *d, const uint8_t *es, const uint8_t *explicit_nonce, uint8_t nonce[12]) {
  if (d->suite->mode == DTLS_MODE_CHACHA) {
    memcpy(nonce, d->iv, 12);
    for (int i = 0; i < 8; i++) nonce[4 + i] ^= es[i];
  } else {
    memcpy(nonce, d->iv, 4);
    memcpy(nonce + 4, explicit_nonce, 8);
  }
}

/* The AEAD operation itself; on decryption `tag` is the received tag and the result says whether it matched. */
static int aead(dtls_dir_t *d, const uint8_t nonce[12], const uint8_t aad[13], const uint8_t *in, size_t len,
                uint8_t *out, uint8_t *tag) {
  EVP_CIPHER_CTX *ctx = d->ctx;
  const dtls_suite_t *s = d->suite;
  int outl = 0, finl = 0;
  uint8_t scratch[16] = {0};
  /* CCM takes an empty message only with non-NULL pointers (NULL means "additional data" or "final"). */
  uint8_t *o = out != NULL ? out : scratch;
  if (in == NULL) in = scratch;
  if (s->mode == DTLS_MODE_CCM) {
    if (!d->encrypt && ossl.ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, s->tag_len, tag) != 1) return 0;
    if (ossl.init(ctx, NULL, NULL, NULL, nonce, -1) != 1) return 0;
    if (ossl.update(ctx, NULL, &outl, NULL, (int)len) != 1) return 0; /* CCM needs the length first */
    if (ossl.update(ctx, NULL, &outl, aad, 13) != 1) return 0;
    /* On decryption this call also checks the tag. */
    if (ossl.update(ctx, o, &outl, in, (int)len) != 1) return 0;
    if (d->encrypt) {
      if (ossl.final(ctx, o + outl, &finl) != 1) return 0;
      if (ossl.ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, s->tag_len, tag) != 1) return 0;
    }
    return 1;
  }
  if (ossl.init(ctx, NULL, NULL, NULL, nonce, -1) != 1) return 0;
  if (ossl.update(ctx, NULL, &outl, aad, 13) != 1) return 0;
  if (len > 0 && ossl.update(ctx, o, &outl, in, (int)len) != 1) return 0;
  if (!d->encrypt && ossl.ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, s->tag_len, tag) != 1) return 0;
  if (ossl.final(ctx, o + outl, &finl) != 1) return 0;
  if (d->encrypt && ossl.ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, s->tag_len, tag) != 1) return 0;
  return 1;
}

long dtls_seal(dtls_dir_t *d, uint8_t type, uint16_t epoch, uint64_t seq, const uint8_t *pt, size_t len,
               uint8_t *out, size_t cap) {
  const dtls_suite_t *s = d->suite;
  if (s == NULL || !d->encrypt || seq > DTLS_MAX_SEQ) return -1;
  size_t fragment = s->explicit_nonce_len + len + s->tag_len;
  if (fragment > 0xffff || cap < DTLS_HEADER_LEN + fragment) return -1;
  out[0] = type;
  out[1] = 0xfe;
  out[2] = 0xfd;
  out[3] = (uint8_t)(epoch >> 8);
  out[4] = (uint8_t)epoch;
  for (int i = 0; i < 6; i++) out[5 + i] = (uint8_t)(seq >> (40 - 8 * i));
  out[11] = (uint8_t)(fragment >> 8);
  out[12] = (uint8_t)fragment;
  uint8_t aad[13], nonce[12];
  memcpy(aad, out + 3, 8);
  aad[8] = type;
  aad[9] = 0xfe;
  aad[10] = 0xfd;
  aad[11] = (uint8_t)(len >> 8);
  aad[12] = (uint8_t)len;
  uint8_t *at = out + DTLS_HEADER_LEN;
  if (s->explicit_nonce_len == 8) {
    memcpy(at, out + 3, 8); /* explicit nonce = epoch ‖ seq: unique by construction */
    at += 8;
  }
  make_nonce(d, out + 3, out + 3, nonce);
  int ok = aead(d, nonce, aad, pt, len, len > 0 ? at : NULL, at + len);
  explicit_bzero(nonce, sizeof(nonce)); /* holds the implicit IV */
  if (!ok) return -1;
  return (long)(DTLS_HEADER_LEN + fragment);
}

long dtls_open(dtls_dir_t *d, const uint8_t *rec, size_t rec_len, uint8_t *out) {
  const dtls_suite_t *s = d->suite;
  if (s == NULL || d->encrypt) return -1;
  size_t over = DTLS_HEADER_LEN + s->explicit_nonce_len + s->tag_len;
  if (rec_len < over || rec_len - DTLS_HEADER_LEN > 0xffff) return -1;
  size_t len = rec_len - over;
  uint8_t aad[13], nonce[12], tag[16];
  memcpy(aad, rec + 3, 8);
  aad[8] = rec[0];
  aad[9] = rec[1];
  aad[10] = rec[2];
  aad[11] = (uint8_t)(len >> 8);
  aad[12] = (uint8_t)len;
  const uint8_t *ct = rec + DTLS_HEADER_LEN + s->explicit_nonce_len;
  make_nonce(d, rec + 3, rec + DTLS_HEADER_LEN, nonce);
  /* Copied out first: decrypting in place may overwrite nothing of it, but keep it obviously safe. */
  memcpy(tag, ct + len, s->tag_len);
  int ok = aead(d, nonce, aad, ct, len, len > 0 ? out : NULL, tag);
  explicit_bzero(nonce, sizeof(nonce)); /* holds the implicit IV */
  if (!ok) {
    /* GCM and ChaCha20 write the unauthenticated plaintext before the tag check: wipe it. */
    if (len > 0) memset(out, 0, len);
    return -1;
  }
  return (long)len;
}
