/* Every C API entry point given NULL handles, NULL out-parameters or bad
 * values returns an error status (or a neutral value), never crashes. */

#include "expect-error.h"
#include "partita-c/partita.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  (void)argc;
  /* Neutral values for NULL handles. */
  if (!partita_status_ok(NULL) || *partita_status_message(NULL) ||
      partita_compile_result_ok(NULL) ||
      partita_compile_result_diagnostic_count(NULL) ||
      *partita_compile_result_error_text(NULL) ||
      *partita_artifact_report(NULL) || partita_artifact_file_count(NULL) ||
      partita_session_input_count(NULL) || partita_session_output_count(NULL) ||
      *partita_session_target(NULL) || partita_dtype_name(99) ||
      partita_dtype_size(-1) || partita_dtype_size(PARTITA_DTYPE_BF16) != 2) {
    printf("FAIL neutral values\n");
    ++failures;
  }
  partita_status_destroy(NULL);
  partita_compile_options_destroy(NULL);
  partita_compile_result_destroy(NULL);
  partita_artifact_destroy(NULL);
  partita_session_destroy(NULL);
  partita_session_options_destroy(NULL);

  expectError(partita_compile_options_add_mesh_axis(NULL, "tp", 2), "options",
              "add_mesh_axis(NULL)");
  partita_compile_options *options = partita_compile_options_create();
  expectError(partita_compile_options_add_mesh_axis(options, NULL, 2), "name",
              "add_mesh_axis(name NULL)");
  expectError(partita_compile_options_add_mesh_axis_with_role(options, "model",
                                                              2, NULL),
              "role", "add_mesh_axis_with_role(role NULL)");
  expectError(partita_compile_options_set_target(options, NULL), "target",
              "set_target");
  /* Spellings the option does not take, refused when set. */
  struct {
    partita_status *status;
    const char *needle;
  } refused[] = {
      {partita_compile_options_set_target(options, "tpu"),
       "partita_compile_options_set_target: --target expects host or cuda, "
       "got 'tpu'"},
      {partita_compile_options_set_strategy(options, "alpa"),
       "--strategy expects megatron or none, got 'alpa'"},
      {partita_compile_options_set_sp_mode(options, "zigzag"),
       "--sp-mode expects none, megatron, ulysses or ring, got 'zigzag'"},
      {partita_compile_options_set_dtype(options, "fp8"),
       "--dtype expects fp32, bf16 or fp16, got 'fp8'"},
      {partita_compile_options_set_collective_matmul(options, "some"),
       "--collective-matmul expects auto, always or never, got 'some'"},
      /* The generic setter checks each value against the option's
         declaration: kind, range and choices, naming the flag. */
      {partita_compile_options_set(options, "microbatches", "2.5"),
       "partita_compile_options_set: --microbatches expects an integer, got "
       "'2.5'"},
      {partita_compile_options_set(options, "microbatches", "0"),
       "--microbatches must be positive, got 0"},
      {partita_compile_options_set(options, "virtual-stages", "4096"),
       "--virtual-stages must be at most 1024, got 4096"},
      {partita_compile_options_set(options, "mesh", "tp=0"),
       "--mesh tp=0: axis 'tp' has size 0; sizes are at least 1"},
      {partita_compile_options_set(options, "overlap", "sometimes"),
       "--overlap expects true or false, got 'sometimes'"},
      {partita_compile_options_set(options, "sp_mode", "ring"),
       "unknown option 'sp_mode'"},
      {partita_compile_options_set(options, "emit", "nn"),
       "unknown option 'emit'"},
      {partita_compile_options_set(options, "mesh", NULL), "'value' is null"},
      /* The typed setters check as the generic one does, at once. */
      {partita_compile_options_set_microbatches(options, -1),
       "partita_compile_options_set_microbatches: --microbatches must be "
       "positive, got -1"},
      {partita_compile_options_set_virtual_stages(options, INT64_MIN),
       "--virtual-stages must be positive"},
      {partita_compile_options_set_max_seq(options, -1), "--max-seq must be"},
      {partita_compile_options_set_auto_mesh(options, (int64_t)1 << 40),
       "--devices must be at most 1048576"},
      {partita_compile_options_set_device_memory(options, NAN),
       "--device-memory must be positive"},
      {partita_compile_options_set_device_memory(options, -1.0),
       "--device-memory must be positive"},
      {partita_compile_options_add_mesh_axis(options, "tp", 0),
       "--mesh tp=0: axis 'tp' has size 0; sizes are at least 1"},
      {partita_compile_options_add_mesh_axis_with_role(options, "model", 2,
                                                       "xp"),
       "unknown role 'xp'"},
      {partita_compile_options_set_bind(options, "batch", -1),
       "--bind expects name=value with a non-negative integer value, got "
       "'batch=-1'"},
      {partita_compile_options_set_cluster_json(options, "host"),
       "partita_compile_options_set_cluster_json: "},
      {partita_compile_options_set_cluster_json(options, "{\"bogus\": 1}"),
       "bogus"},
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i)
    expectError(refused[i].status, refused[i].needle, refused[i].needle);
  /* Every name the generic setter lists, it takes. */
  if (partita_compile_option_count() < 10 ||
      partita_compile_option_name(partita_compile_option_count()) != NULL) {
    printf("FAIL partita_compile_option_count/name\n");
    ++failures;
  }
  for (size_t i = 0; i < partita_compile_option_count(); ++i)
    if (!partita_compile_option_name(i)) {
      printf("FAIL option name %zu is NULL\n", i);
      ++failures;
    }
  if (!partita_status_ok(
          partita_compile_options_set(options, "mesh", "model=2:tp")) ||
      !partita_status_ok(
          partita_compile_options_set(options, "device-memory", "80GB")) ||
      !partita_status_ok(
          partita_compile_options_set(options, "device-memory", "")) ||
      !partita_status_ok(partita_compile_options_set(options, "mesh", ""))) {
    printf("FAIL good values refused by partita_compile_options_set\n");
    ++failures;
  }
  if (!partita_status_ok(partita_compile_options_set_sp_mode(options, "")) ||
      !partita_status_ok(partita_compile_options_set_dtype(options, "bf16"))) {
    printf("FAIL good spellings refused\n");
    ++failures;
  }
  expectError(partita_compile_options_set_cuda_archs(options, NULL, 1), "archs",
              "set_cuda_archs");
  const char *archs[] = {"sm_80", NULL};
  expectError(partita_compile_options_set_cuda_archs(options, archs, 2),
              "archs[1]", "set_cuda_archs(NULL entry)");
  expectError(partita_compile_options_set_cluster_json(options, NULL), "json",
              "set_cluster_json");

  partita_compile_result *result = NULL;
  expectError(partita_compile_file(NULL, options, &result), "path",
              "compile_file(path NULL)");
  expectError(partita_compile_file(argv[1], options, NULL), "result",
              "compile_file(result NULL)");
  expectError(partita_compile_buffer(NULL, 10, NULL, NULL, &result), "data",
              "compile_buffer(data NULL)");
  /* Garbage: an error status, and a result holding the diagnostics. */
  expectError(partita_compile_buffer("garbage", 7, "junk.onnx", NULL, &result),
              "junk.onnx", "compile_buffer(garbage)");
  if (!result || partita_compile_result_ok(result) ||
      partita_compile_result_diagnostic_count(result) == 0) {
    printf("FAIL garbage: no diagnostics\n");
    ++failures;
  }
  partita_artifact *artifact = (partita_artifact *)1;
  expectError(partita_compile_result_artifact(result, &artifact),
              "compilation failed", "artifact of a failed compile");
  if (artifact) {
    printf("FAIL artifact not reset\n");
    ++failures;
  }
  expectError(partita_compile_result_diagnostic(result, 1000, NULL, NULL, NULL),
              "out of range", "diagnostic(1000)");
  partita_compile_result_destroy(result);

  /* Planning (--mesh auto without compiling): bad arguments are refused, a
   * model that cannot be read is an error with the result set, and a good
   * one gives the plan's JSON and table. */
  expectError(partita_compile_options_set_objective(options, "fast"),
              "--objective expects latency, throughput, decode-latency or "
              "decode-throughput, got 'fast'",
              "set_objective(fast)");
  expectError(partita_compile_options_set_objective(options, NULL), "objective",
              "set_objective(NULL)");
  expectError(partita_compile_options_set_auto_mesh(NULL, 2), "options",
              "set_auto_mesh(NULL)");
  partita_plan_result *plan = NULL;
  expectError(partita_plan_file(NULL, NULL, &plan), "path", "plan_file(NULL)");
  expectError(partita_plan_file(argv[1], NULL, NULL), "result",
              "plan_file(result NULL)");
  if (partita_plan_result_ok(NULL) || *partita_plan_result_json(NULL) ||
      *partita_plan_result_table(NULL) ||
      *partita_plan_result_error_text(NULL)) {
    printf("FAIL plan_result accessors on NULL\n");
    ++failures;
  }
  expectError(partita_plan_buffer("garbage", 7, "junk.onnx", NULL, &plan),
              "junk.onnx", "plan_buffer(garbage)");
  if (!plan || partita_plan_result_ok(plan) ||
      !strstr(partita_plan_result_error_text(plan), "junk.onnx")) {
    printf("FAIL plan_buffer(garbage) result\n");
    ++failures;
  }
  partita_plan_result_destroy(plan);
  partita_compile_options *planning = partita_compile_options_create();
  partita_status_destroy(partita_compile_options_set_auto_mesh(planning, 4));
  partita_status_destroy(
      partita_compile_options_set_objective(planning, "throughput"));
  partita_status_destroy(partita_compile_options_set_cluster_json(
      planning, "{\"preset\": \"h100-80g\"}"));
  plan = NULL;
  partita_status *planned = partita_plan_file(argv[1], planning, &plan);
  if (!partita_status_ok(planned) || !partita_plan_result_ok(plan) ||
      !strstr(partita_plan_result_json(plan), "\"chosen\"") ||
      !strstr(partita_plan_result_json(plan),
              "\"objective\": \"throughput\"") ||
      !strstr(partita_plan_result_table(plan),
              "plan for 4 devices on h100-80g (1 x 8), objective "
              "throughput")) {
    printf("FAIL plan_file(%s): %s\n", argv[1],
           partita_status_message(planned));
    ++failures;
  }
  partita_status_destroy(planned);
  partita_plan_result_destroy(plan);
  /* A budget nothing fits in is a plan without a choice, not an error. */
  partita_status_destroy(
      partita_compile_options_set_device_memory(planning, 1e8));
  plan = NULL;
  planned = partita_plan_file(argv[1], planning, &plan);
  if (!partita_status_ok(planned) ||
      strstr(partita_plan_result_json(plan), "\"chosen\"") ||
      !strstr(partita_plan_result_table(plan), "(no plan fits)")) {
    printf("FAIL plan_file(1e8 bytes per device)\n");
    ++failures;
  }
  partita_status_destroy(planned);
  partita_plan_result_destroy(plan);
  partita_compile_options_destroy(planning);

  /* A refused setter leaves the options as they were: the mesh axis of a
     role no axis can play is not kept, and the model compiles unsharded. */
  partita_compile_options *roles = partita_compile_options_create();
  expectError(
      partita_compile_options_add_mesh_axis_with_role(roles, "model", 2, "xp"),
      "--mesh model=2:xp: 'model=2:xp': unknown role 'xp'",
      "add_mesh_axis_with_role(unknown role)");
  result = NULL;
  partita_status *kept = partita_compile_file(argv[1], roles, &result);
  if (!partita_status_ok(kept) || !partita_compile_result_ok(result)) {
    printf("FAIL compile_file after a refused mesh axis\n");
    ++failures;
  }
  partita_status_destroy(kept);
  partita_compile_result_destroy(result);
  partita_compile_options_destroy(roles);

  expectError(partita_artifact_save(NULL, "x"), "artifact", "save(NULL)");
  expectError(partita_artifact_file(NULL, 0, NULL, NULL, NULL), "artifact",
              "file(NULL)");

  partita_session *session = NULL;
  expectError(partita_session_load_path(NULL, NULL, &session), "path",
              "load_path(NULL)");
  expectError(partita_session_load_path("/nonexistent", NULL, NULL), "session",
              "load_path(session NULL)");
  expectError(partita_session_load_path("/nonexistent", NULL, &session),
              "nonexistent", "load_path(missing)");
  expectError(partita_session_load_artifact(NULL, NULL, &session), "artifact",
              "load_artifact(NULL)");
  expectError(partita_session_run(NULL, NULL, 0, NULL, 0), "session",
              "run(NULL)");
  expectError(partita_session_input(NULL, 0, NULL), "session", "input(NULL)");
  partita_session_options *sessionOptions = partita_session_options_create();
  expectError(partita_session_options_set_timeout_seconds(sessionOptions, -1),
              "positive", "timeout -1");
  expectError(partita_session_options_set_verify_weights(NULL, 1), "options",
              "set_verify_weights(NULL)");

  /* A real session, then bad tensors. */
  partita_compile_options_destroy(options);
  if (partita_status_ok(partita_compile_file(argv[1], NULL, &result))) {
    partita_compile_result_artifact(result, &artifact);
    /* More kernel threads than a rank may have: refused at load, never an
       abort while the threads are made. */
    partita_session_options *greedy = partita_session_options_create();
    partita_session_options_set_threads_per_rank(greedy, 4294967295u);
    partita_session *refused = NULL;
    expectError(partita_session_load_artifact(artifact, greedy, &refused),
                "threads per rank must be at most 1024, not 4294967295",
                "threads_per_rank UINT_MAX");
    partita_session_options_destroy(greedy);
    partita_session_load_artifact(artifact, NULL, &session);
    partita_tensor info;
    expectError(partita_session_input(session, 5, &info), "out of range",
                "input(5)");
    int64_t shape[] = {2, 16};
    int64_t ids[32] = {0};
    partita_tensor bad[] = {{NULL, PARTITA_DTYPE_I64, 2, shape, ids},
                            {"input_ids", 42, 2, shape, ids},
                            {"input_ids", PARTITA_DTYPE_I64, -1, shape, ids},
                            {"input_ids", PARTITA_DTYPE_I64, 2, NULL, ids},
                            {"input_ids", PARTITA_DTYPE_I64, 2, shape, NULL}};
    const char *needles[] = {"name is null", "unknown dtype", "invalid rank",
                             "shape is null", "data is null"};
    for (int i = 0; i < 5; ++i)
      expectError(partita_session_run(session, &bad[i], 1, NULL, 0), needles[i],
                  needles[i]);
    expectError(partita_session_run(session, NULL, 1, NULL, 0), "inputs",
                "run(inputs NULL)");
    /* Counts beyond the model's are refused before anything is sized by
       them (SIZE_MAX let std::length_error escape the C ABI). */
    expectError(partita_session_run(session, bad, (size_t)-1, NULL, 0),
                "18446744073709551615 inputs and 0 outputs given; the model "
                "has 1 and 1",
                "run(num_inputs SIZE_MAX)");
    expectError(partita_session_run(session, bad, 1, bad, (size_t)-1),
                "outputs given", "run(num_outputs SIZE_MAX)");
    partita_session_destroy(session);

    /* Weight bytes changed on disk: loaded as they are by default (only
     * the manifest and programs are hashed), refused with verification. */
    if (argc > 2 &&
        partita_status_ok(partita_artifact_save(artifact, argv[2]))) {
      char weights[4096];
      snprintf(weights, sizeof weights,
               "%s/weights/model-00001-of-00001.safetensors", argv[2]);
      FILE *file = fopen(weights, "r+b");
      if (file && fseek(file, -1, SEEK_END) == 0) {
        int last = fgetc(file);
        fseek(file, -1, SEEK_END);
        fputc(last ^ 1, file);
      }
      if (file)
        fclose(file);
      session = NULL;
      if (!partita_status_ok(
              partita_session_load_path(argv[2], sessionOptions, &session))) {
        printf("FAIL load_path(tampered weights, no verify)\n");
        ++failures;
      }
      partita_session_destroy(session);
      partita_session_options_set_verify_weights(sessionOptions, 1);
      expectError(partita_session_load_path(argv[2], sessionOptions, &session),
                  "model-00001-of-00001.safetensors: hash mismatch",
                  "load_path(tampered weights, verify)");
    } else {
      printf("FAIL saving the artifact to verify\n");
      ++failures;
    }
    partita_artifact_destroy(artifact);
  } else {
    printf("FAIL compiling %s\n", argv[1]);
    ++failures;
  }
  partita_compile_result_destroy(result);
  partita_session_options_destroy(sessionOptions);
  printf("%d failures\n", failures);
  return failures != 0;
}
