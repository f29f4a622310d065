/* An LD_PRELOAD library for wrk (budgethandshake in scripts/bench-proxies.sh,
 * compiled there with cc): every new TLS connection makes a full handshake.
 * wrk reuses one SSL object per connection slot; after a closed connection
 * (SSL_shutdown, SSL_clear) it keeps the session, so its next connect would
 * resume it. Here, before a handshake starts, the session is dropped:
 * SSL_set_session(ssl, NULL) when the object is still before the handshake.
 * Nothing else of wrk changes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;
int SSL_in_before(const SSL *s);
int SSL_set_session(SSL *s, SSL_SESSION *session);

int SSL_connect(SSL *s) {
  static int (*next)(SSL *);
  if (next == NULL) next = (int (*)(SSL *))dlsym(RTLD_NEXT, "SSL_connect");
  if (SSL_in_before(s)) SSL_set_session(s, NULL);
  return next(s);
}
