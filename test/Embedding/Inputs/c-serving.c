/* Generation through the C API: a KV-cache export compiled with max_seq at
 * tp=2, greedy tokens from partita_session_generate, the same tokens from
 * the step API (the caller's argmax), and the serving errors. */

#include "expect-error.h"
#include "partita-c/partita.h"

#include <stdio.h>
#include <string.h>

#define BATCH 2
#define PROMPT 8
#define VOCAB 128
#define NEW 6

static int check(partita_status *status, const char *what) {
  if (partita_status_ok(status))
    return 1;
  printf("FAIL %s: %s\n", what, partita_status_message(status));
  partita_status_destroy(status);
  ++failures;
  return 0;
}

static void argmax(const float *logits, int64_t *tokens) {
  for (int b = 0; b < BATCH; ++b) {
    int best = 0;
    for (int v = 1; v < VOCAB; ++v)
      if (logits[b * VOCAB + v] > logits[b * VOCAB + best])
        best = v;
    tokens[b] = best;
  }
}

static partita_session *load(const char *model, int64_t maxSeq) {
  partita_compile_options *options = partita_compile_options_create();
  check(partita_compile_options_set_bind(options, "batch_size", BATCH), "bind");
  check(partita_compile_options_set_bind(options, "sequence_length",
                                         maxSeq ? PROMPT : 1),
        "bind");
  if (maxSeq) {
    check(partita_compile_options_add_mesh_axis(options, "tp", 2), "mesh");
    check(partita_compile_options_set_max_seq(options, maxSeq), "max_seq");
  } else {
    check(partita_compile_options_set_bind(options, "past_sequence_length", 7),
          "bind");
  }
  partita_compile_result *result = NULL;
  partita_artifact *artifact = NULL;
  partita_session *session = NULL;
  if (check(partita_compile_file(model, options, &result), "compile") &&
      check(partita_compile_result_artifact(result, &artifact), "artifact"))
    check(partita_session_load_artifact(artifact, NULL, &session), "load");
  partita_artifact_destroy(artifact);
  partita_compile_result_destroy(result);
  partita_compile_options_destroy(options);
  return session;
}

int main(int argc, char **argv) {
  (void)argc;
  expectError(partita_compile_options_set_max_seq(NULL, 8), "options",
              "set_max_seq(NULL)");
  partita_compile_options *options = partita_compile_options_create();
  expectError(partita_compile_options_set_max_seq(options, -1),
              "--max-seq must be 0 or more, got -1", "set_max_seq(-1)");
  partita_compile_options_destroy(options);

  partita_session *session = load(argv[1], 32);
  if (!session) {
    printf("%d failures\n", failures + 1);
    return 1;
  }
  int64_t ids[BATCH * 6] = {5, 6, 7, 8, 9, 10, 0, 0, 3, 4, 5, 6};
  int64_t mask[BATCH * 6] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1};
  int64_t promptShape[2] = {BATCH, 6};
  partita_tensor idsTensor = {"input_ids", PARTITA_DTYPE_I64, 2, promptShape,
                              ids};
  partita_tensor maskTensor = {"attention_mask", PARTITA_DTYPE_I64, 2,
                               promptShape, mask};
  int64_t tokens[BATCH * NEW];
  check(partita_session_generate(session, &idsTensor, &maskTensor, NEW, tokens,
                                 BATCH * NEW),
        "generate");

  /* The step API with the caller's argmax gives the same tokens. */
  float logits[BATCH * VOCAB];
  int64_t logitsShape[2] = {BATCH, VOCAB}, tokenShape[1] = {BATCH};
  partita_tensor logitsTensor = {"logits", PARTITA_DTYPE_F32, 2, logitsShape,
                                 logits};
  int64_t next[BATCH];
  partita_tensor nextTensor = {"tokens", PARTITA_DTYPE_I64, 1, tokenShape,
                               next};
  check(
      partita_session_prefill(session, &idsTensor, &maskTensor, &logitsTensor),
      "prefill");
  int same = 1;
  for (int step = 0; step < NEW; ++step) {
    argmax(logits, next);
    for (int b = 0; b < BATCH; ++b)
      same &= next[b] == tokens[b * NEW + step];
    if (step + 1 < NEW)
      check(partita_session_step(session, &nextTensor, &logitsTensor), "step");
  }
  printf("step tokens equal generate: %s\n", same ? "yes" : "no");

  expectError(partita_session_generate(session, &idsTensor, &maskTensor, NEW,
                                       tokens, 3),
              "capacity", "generate(capacity 3)");
  expectError(partita_session_generate(session, &idsTensor, &maskTensor, 40,
                                       tokens, BATCH * NEW),
              "cache", "generate(40 tokens)");
  expectError(
      partita_session_generate(session, NULL, NULL, NEW, tokens, BATCH * NEW),
      "input_ids", "generate(NULL ids)");
  expectError(partita_session_step(NULL, &nextTensor, &logitsTensor), "session",
              "step(NULL)");
  partita_session_destroy(session);

  partita_session *plain = load(argv[1], 0);
  if (plain) {
    expectError(partita_session_generate(plain, &idsTensor, NULL, NEW, tokens,
                                         BATCH * NEW),
                "max-seq", "generate(not serving)");
    expectError(partita_session_step(plain, &nextTensor, &logitsTensor),
                "max-seq", "step(not serving)");
    partita_session_destroy(plain);
  }
  // decode-throughput plans the decode step at the largest batch that fits:
  // the tiny model fits the cap, 1024 sequences.
  partita_compile_options *planning = partita_compile_options_create();
  check(partita_compile_options_set_bind(planning, "batch_size", BATCH),
        "bind");
  check(partita_compile_options_set_bind(planning, "sequence_length", PROMPT),
        "bind");
  check(partita_compile_options_set_max_seq(planning, 48), "max_seq");
  check(partita_compile_options_set_auto_mesh(planning, 2), "auto_mesh");
  check(partita_compile_options_set_objective(planning, "decode-throughput"),
        "objective");
  partita_plan_result *plan = NULL;
  if (check(partita_plan_file(argv[1], planning, &plan), "plan")) {
    const char *json = partita_plan_result_json(plan);
    int serves = strstr(json, "\"objective\": \"decode-throughput\"") &&
                 strstr(json, "\"batch\": 1024");
    printf("decode-throughput plan serves 1024: %s\n", serves ? "yes" : "no");
  }
  partita_plan_result_destroy(plan);
  partita_compile_options_destroy(planning);
  printf("%d failures\n", failures);
  return failures != 0;
}
