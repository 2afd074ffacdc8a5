/* What the C API tests share: a count of failures, and expectError, which
 * checks that a call returned an error status whose message contains a
 * needle, printing FAIL otherwise. */

#ifndef PARTITA_TEST_EMBEDDING_EXPECT_ERROR_H
#define PARTITA_TEST_EMBEDDING_EXPECT_ERROR_H

#include "partita-c/partita.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

/* Expects an error status whose message contains `needle`. */
static void expectError(partita_status *status, const char *needle,
                        const char *what) {
  if (partita_status_ok(status)) {
    printf("FAIL %s: succeeded\n", what);
    ++failures;
    return;
  }
  if (!strstr(partita_status_message(status), needle)) {
    printf("FAIL %s: '%s' lacks '%s'\n", what, partita_status_message(status),
           needle);
    ++failures;
  }
  partita_status_destroy(status);
}

#endif /* PARTITA_TEST_EMBEDDING_EXPECT_ERROR_H */
