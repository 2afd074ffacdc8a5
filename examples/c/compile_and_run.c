/*===- compile_and_run.c - Partita's C API, end to end
---------------------===*\
|*                                                                            *|
|* Part of the Partita project.                                               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * Compiles an ONNX language model for a tensor-parallel mesh, runs it on
 * token ids made up here, and prints each output's statistics and the
 * report's world size:
 *
 *   partita-example-c test/models/gpt2.onnx [TP]
 *
 * TP defaults to 2. A mesh the model cannot be split over (gpt2's 4 heads
 * over tp=3) prints the compiler's diagnostics and exits with status 1.
 */

#include "partita-c/partita.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints and frees `status`; returns 1 when it was an error. */
static int failed(partita_status *status, const char *what) {
  if (partita_status_ok(status))
    return 0;
  fprintf(stderr, "%s: %s\n", what, partita_status_message(status));
  partita_status_destroy(status);
  return 1;
}

static int64_t elementCount(const partita_tensor *tensor) {
  int64_t count = 1;
  for (int64_t i = 0; i < tensor->rank; ++i)
    count *= tensor->shape[i];
  return count;
}

static void printTensor(const char *kind, const partita_tensor *tensor) {
  printf("%s %s %s [", kind, tensor->name, partita_dtype_name(tensor->dtype));
  for (int64_t i = 0; i < tensor->rank; ++i)
    printf("%s%lld", i ? ", " : "", (long long)tensor->shape[i]);
  printf("]");
}

/* The integer after `"key":` in the JSON text, or -1. Enough for the
 * report's scalar fields; a real program would use a JSON parser. */
static long long jsonInteger(const char *json, const char *key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\"", key);
  const char *at = strstr(json, pattern);
  if (!at)
    return -1;
  at = strchr(at + strlen(pattern), ':');
  return at ? strtoll(at + 1, NULL, 10) : -1;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MODEL.onnx [TP]\n", argv[0]);
    return 2;
  }
  int64_t tp = argc == 3 ? strtoll(argv[2], NULL, 10) : 2;
  printf("partita %s\n", partita_version());

  partita_compile_options *options = partita_compile_options_create();
  if (!options ||
      failed(partita_compile_options_add_mesh_axis(options, "tp", tp),
             "options"))
    return 1;
  partita_compile_result *result = NULL;
  partita_status *status = partita_compile_file(argv[1], options, &result);
  partita_compile_options_destroy(options);
  if (!partita_status_ok(status)) {
    /* The message holds every diagnostic; they are also there one by one. */
    size_t count = partita_compile_result_diagnostic_count(result);
    fprintf(stderr, "compilation failed with %zu diagnostic(s):\n", count);
    for (size_t i = 0; i < count; ++i) {
      partita_severity severity;
      const char *location, *message;
      if (partita_status_ok(partita_compile_result_diagnostic(
              result, i, &severity, &location, &message)))
        fprintf(stderr, "  [%s] %s: %s\n",
                severity == PARTITA_SEVERITY_ERROR ? "error" : "other",
                *location ? location : "(no location)", message);
    }
    partita_status_destroy(status);
    partita_compile_result_destroy(result);
    return 1;
  }
  partita_artifact *artifact = NULL;
  status = partita_compile_result_artifact(result, &artifact);
  partita_compile_result_destroy(result);
  if (failed(status, "artifact"))
    return 1;
  const char *report = partita_artifact_report(artifact);
  printf("report: world size %lld, %zu artifact files\n",
         jsonInteger(report, "world_size"),
         partita_artifact_file_count(artifact));

  partita_session *session = NULL;
  status = partita_session_load_artifact(artifact, NULL, &session);
  partita_artifact_destroy(artifact);
  if (failed(status, "load"))
    return 1;
  printf("target %s\n", partita_session_target(session));

  size_t numInputs = partita_session_input_count(session);
  size_t numOutputs = partita_session_output_count(session);
  partita_tensor *inputs = calloc(numInputs + 1, sizeof(partita_tensor));
  partita_tensor *outputs = calloc(numOutputs + 1, sizeof(partita_tensor));
  int exitCode = 1;
  if (!inputs || !outputs)
    goto done;
  /* Token ids i*7 mod 64 (under any vocabulary of this size or more); an
   * attention mask, where the model has one, of all ones. */
  for (size_t i = 0; i < numInputs; ++i) {
    if (failed(partita_session_input(session, i, &inputs[i]), "input"))
      goto done;
    int64_t count = elementCount(&inputs[i]);
    inputs[i].data = malloc(count * partita_dtype_size(inputs[i].dtype) + 1);
    if (!inputs[i].data)
      goto done;
    int mask = strstr(inputs[i].name, "mask") != NULL;
    for (int64_t e = 0; e < count; ++e) {
      int64_t value = mask ? 1 : (e * 7) % 64;
      if (inputs[i].dtype == PARTITA_DTYPE_I64)
        ((int64_t *)inputs[i].data)[e] = value;
      else if (inputs[i].dtype == PARTITA_DTYPE_I32)
        ((int32_t *)inputs[i].data)[e] = (int32_t)value;
      else {
        fprintf(stderr, "input %s: only integer inputs are made up here\n",
                inputs[i].name);
        goto done;
      }
    }
    printTensor("input", &inputs[i]);
    printf("\n");
  }
  for (size_t i = 0; i < numOutputs; ++i) {
    if (failed(partita_session_output(session, i, &outputs[i]), "output"))
      goto done;
    size_t bytes =
        elementCount(&outputs[i]) * partita_dtype_size(outputs[i].dtype);
    outputs[i].data = malloc(bytes + 1);
    if (!outputs[i].data)
      goto done;
  }
  if (failed(
          partita_session_run(session, inputs, numInputs, outputs, numOutputs),
          "run"))
    goto done;

  for (size_t i = 0; i < numOutputs; ++i) {
    printTensor("output", &outputs[i]);
    if (outputs[i].dtype == PARTITA_DTYPE_F32) {
      const float *values = outputs[i].data;
      int64_t count = elementCount(&outputs[i]);
      double sum = 0, min = values[0], max = values[0];
      for (int64_t e = 0; e < count; ++e) {
        sum += values[e];
        min = values[e] < min ? values[e] : min;
        max = values[e] > max ? values[e] : max;
      }
      printf(": min %.4f max %.4f mean %.6f", min, max, sum / (double)count);
    }
    printf("\n");
  }
  exitCode = 0;

done:
  for (size_t i = 0; inputs && i < numInputs; ++i)
    free(inputs[i].data);
  for (size_t i = 0; outputs && i < numOutputs; ++i)
    free(outputs[i].data);
  free(inputs);
  free(outputs);
  partita_session_destroy(session);
  return exitCode;
}
