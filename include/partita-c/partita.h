/*===- partita.h - Partita's C embedding API ----------------------*- C -*-===*\
|*                                                                            *|
|* Part of the Partita project.                                               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * The C API over include/partita/Partita.h: compile an ONNX model for a
 * device mesh and run the result from C (or any language with a C FFI).
 * Pure C99; every object is an opaque handle that its `_destroy` function
 * frees, and no C++ type crosses the boundary.
 *
 * Errors. A fallible function returns `partita_status *`: NULL means
 * success, anything else is an error the caller owns and frees with
 * partita_status_destroy(). Every pointer argument is checked: a NULL
 * handle or out-parameter gives an error status, never a crash. Accessors
 * that cannot fail return their value directly (0, NULL or "" for a NULL
 * handle). Strings and arrays returned by an accessor belong to the handle
 * and live as long as it does.
 *
 *   partita_compile_options *options = partita_compile_options_create();
 *   partita_compile_options_add_mesh_axis(options, "tp", 2);
 *   partita_compile_result *result = NULL;
 *   partita_status *status =
 *       partita_compile_file("model.onnx", options, &result);
 *   if (status) {
 *     fprintf(stderr, "%s\n", partita_status_message(status));
 *     ...
 *   }
 *   partita_artifact *artifact = NULL;
 *   partita_compile_result_artifact(result, &artifact);
 *   partita_session *session = NULL;
 *   partita_session_load_artifact(artifact, NULL, &session);
 *   partita_session_run(session, inputs, 1, outputs, 1);
 *
 * Threads: distinct handles may be used from distinct threads; one handle
 * from one thread at a time, and one run of a session at a time.
 */

#ifndef PARTITA_C_PARTITA_H
#define PARTITA_C_PARTITA_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define PARTITA_C_EXPORT __declspec(dllexport)
#else
#define PARTITA_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*===----------------------------------------------------------------------===*
 * Status
 *===----------------------------------------------------------------------===*/

/* An error: a message. A NULL status is success. */
typedef struct partita_status partita_status;

/* 1 when `status` is NULL (success), 0 otherwise. */
PARTITA_C_EXPORT int partita_status_ok(const partita_status *status);
/* The error's message; "" for NULL. */
PARTITA_C_EXPORT const char *
partita_status_message(const partita_status *status);
/* Frees `status`; NULL is a no-op. */
PARTITA_C_EXPORT void partita_status_destroy(partita_status *status);

/* This library's version, "MAJOR.MINOR.PATCH". */
PARTITA_C_EXPORT const char *partita_version(void);

/*===----------------------------------------------------------------------===*
 * Element types
 *===----------------------------------------------------------------------===*/

/* The values of partita_tensor.dtype (partita::DType in the same order). */
typedef enum partita_dtype {
  PARTITA_DTYPE_F32 = 0,
  PARTITA_DTYPE_F16 = 1,
  PARTITA_DTYPE_BF16 = 2,
  PARTITA_DTYPE_I64 = 3,
  PARTITA_DTYPE_I32 = 4,
  PARTITA_DTYPE_I8 = 5,
  PARTITA_DTYPE_BOOL = 6
} partita_dtype;

/* "f32", "f16", "bf16", "i64", "i32", "i8", "bool"; NULL for any other
 * value. */
PARTITA_C_EXPORT const char *partita_dtype_name(int dtype);
/* Bytes per element (bf16 and f16: 2, bool: 1); 0 for any other value. */
PARTITA_C_EXPORT size_t partita_dtype_size(int dtype);

/*===----------------------------------------------------------------------===*
 * Compile options: the flags of partita-compile
 *
 * partita_compile_options_set sets any option by its flag's name; the typed
 * setters after it are kept for compatibility and set the same fields.
 *===----------------------------------------------------------------------===*/

typedef struct partita_compile_options partita_compile_options;

/* Options with partita-compile's defaults (one device, host, megatron,
 * fp32, overlap on); NULL only when out of memory. */
PARTITA_C_EXPORT partita_compile_options *partita_compile_options_create(void);
PARTITA_C_EXPORT void
partita_compile_options_destroy(partita_compile_options *options);

/* Sets the option `name` (partita-compile's flag without its dashes:
 * "mesh", "sp-mode", "microbatches", "device-memory", ...) from `value`,
 * spelled as the flag's value ("dp=2,tp=2", "auto", "ring", "4", "80GB",
 * "true"). Every option of the typed setters below, and any added later,
 * is set this way; the value is checked against the option's declaration
 * (its kind and range), and an unknown name or a value the option does not
 * take is an error status naming it. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set(partita_compile_options *options, const char *name,
                            const char *value);
/* How many options partita_compile_options_set takes, and the name of the
 * `index`-th in declaration order (NULL past the end). */
PARTITA_C_EXPORT size_t partita_compile_option_count(void);
PARTITA_C_EXPORT const char *partita_compile_option_name(size_t index);

/* Appends a mesh axis (`--mesh dp=2,tp=4` is two calls, in order). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_add_mesh_axis(partita_compile_options *options,
                                      const char *name, int64_t size);
/* Appends a mesh axis with its role (`dp`, `tp`, `pp`, `sp`, `ep` or `none`):
 * `--mesh model=4:tp`. Checked when compiling. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_add_mesh_axis_with_role(
    partita_compile_options *options, const char *name, int64_t size,
    const char *role);
/* Removes every mesh axis (back to one device). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_clear_mesh(partita_compile_options *options);
/* "host" or "cuda"; any other value is an error status naming the values
 * (as are the other setters' below, which take partita-compile's
 * spellings). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_target(partita_compile_options *options,
                                   const char *target);
/* Binds the symbolic dimension `name` (replacing an earlier value). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_bind(partita_compile_options *options,
                                 const char *name, int64_t value);
/* "megatron" or "none". */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_strategy(partita_compile_options *options,
                                     const char *strategy);
/* "none" (or ""), "megatron", "ulysses" or "ring". */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_sp_mode(partita_compile_options *options,
                                    const char *sp_mode);
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_microbatches(partita_compile_options *options,
                                         int64_t microbatches);
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_virtual_stages(partita_compile_options *options,
                                           int64_t virtual_stages);
/* "fp32", "bf16" or "fp16". */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_dtype(partita_compile_options *options,
                                  const char *dtype);
/* Replaces the architectures of --target cuda's fatbin ("sm_80", ...). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_cuda_archs(partita_compile_options *options,
                                       const char *const *archs, size_t count);
/* 0: collectives stay synchronous (--no-overlap). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_overlap(partita_compile_options *options,
                                    int overlap);
/* "auto", "always" or "never". */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_collective_matmul(partita_compile_options *options,
                                              const char *mode);
/* The cluster model as JSON text (--cluster's file contents;
 * {"preset": "h100-80g:2x8"} for a preset, docs/planning.md); "" for the
 * default preset. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_cluster_json(partita_compile_options *options,
                                         const char *json);
/* --mesh auto: the planner chooses the mesh, the sequence mode, the
 * microbatches, the virtual stages and collective matmul for `devices`
 * devices (0: the cluster's); the mesh axes and those options are then
 * ignored. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_auto_mesh(partita_compile_options *options,
                                      int64_t devices);
/* With --mesh auto: "latency" (the default) or "throughput"; with max_seq,
 * "decode-latency" or "decode-throughput" (the plan's candidates are then
 * each at the largest batch that fits: the JSON's `batch`). */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_objective(partita_compile_options *options,
                                      const char *objective);
/* With --mesh auto: the memory of one device in bytes; 0: the cluster's. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_device_memory(partita_compile_options *options,
                                          double bytes);
/* --max-seq: a decoder export with past key values compiles to a prefill
 * and a decode program over one KV cache of `max_seq` tokens per sequence
 * (partita_session_generate); 0: one program. */
PARTITA_C_EXPORT partita_status *
partita_compile_options_set_max_seq(partita_compile_options *options,
                                    int64_t max_seq);

/*===----------------------------------------------------------------------===*
 * Compiling
 *===----------------------------------------------------------------------===*/

/* The outcome of a compilation: the diagnostics, and the artifact when it
 * succeeded. */
typedef struct partita_compile_result partita_compile_result;
/* A compiled model held in memory (the files of the artifact directory). */
typedef struct partita_artifact partita_artifact;

typedef enum partita_severity {
  PARTITA_SEVERITY_ERROR = 0,
  PARTITA_SEVERITY_WARNING = 1,
  PARTITA_SEVERITY_NOTE = 2,
  PARTITA_SEVERITY_REMARK = 3
} partita_severity;

/* Compiles the ONNX model (binary or textual) at `path`. `options` may be
 * NULL for the defaults. On return `*result` is set whenever the arguments
 * were valid, also when compilation failed: the status is then an error
 * whose message is every diagnostic, one per line, and the result holds
 * them one by one. The caller destroys both. */
PARTITA_C_EXPORT partita_status *
partita_compile_file(const char *path, const partita_compile_options *options,
                     partita_compile_result **result);
/* The same for a model in memory; `name` (NULL: "model.onnx") stands for its
 * file name in diagnostics. */
PARTITA_C_EXPORT partita_status *
partita_compile_buffer(const void *data, size_t size, const char *name,
                       const partita_compile_options *options,
                       partita_compile_result **result);
PARTITA_C_EXPORT void
partita_compile_result_destroy(partita_compile_result *result);

/* 1 when compilation succeeded, 0 otherwise (and for NULL). */
PARTITA_C_EXPORT int
partita_compile_result_ok(const partita_compile_result *result);
/* Every diagnostic, errors and warnings alike, one per line as
 * partita-compile prints them; "" for NULL. */
PARTITA_C_EXPORT const char *
partita_compile_result_error_text(const partita_compile_result *result);
PARTITA_C_EXPORT size_t
partita_compile_result_diagnostic_count(const partita_compile_result *result);
/* The diagnostic at `index`: any of `severity`, `location` (the ONNX node,
 * or "" when none) and `message` may be NULL to skip it. */
PARTITA_C_EXPORT partita_status *
partita_compile_result_diagnostic(const partita_compile_result *result,
                                  size_t index, partita_severity *severity,
                                  const char **location, const char **message);
/* A new handle on the compiled artifact (shared with the result: destroying
 * either leaves the other valid); an error when compilation failed. */
PARTITA_C_EXPORT partita_status *
partita_compile_result_artifact(const partita_compile_result *result,
                                partita_artifact **artifact);

/*===----------------------------------------------------------------------===*
 * Planning: --mesh auto's choice, without compiling
 *===----------------------------------------------------------------------===*/

typedef struct partita_plan_result partita_plan_result;

/* Plans the model at `path` as --mesh auto would for `options` (as if
 * partita_compile_options_set_auto_mesh had been called; NULL: the
 * defaults). The model's shapes are read, never its weights. `*result` is
 * set whenever the arguments were valid; the status is an error (every
 * diagnostic, one per line) when the model could not be planned. A plan
 * with no feasible candidate is not an error: its JSON says why each
 * failed. The caller destroys both. */
PARTITA_C_EXPORT partita_status *
partita_plan_file(const char *path, const partita_compile_options *options,
                  partita_plan_result **result);
PARTITA_C_EXPORT partita_status *
partita_plan_buffer(const void *data, size_t size, const char *name,
                    const partita_compile_options *options,
                    partita_plan_result **result);
PARTITA_C_EXPORT void partita_plan_result_destroy(partita_plan_result *result);
/* 1 when the model was planned, 0 otherwise (and for NULL). */
PARTITA_C_EXPORT int partita_plan_result_ok(const partita_plan_result *result);
/* The diagnostics, one per line; "" for NULL. */
PARTITA_C_EXPORT const char *
partita_plan_result_error_text(const partita_plan_result *result);
/* The report's `plan` object with every candidate, best first (JSON,
 * docs/planning.md); "" when not planned. */
PARTITA_C_EXPORT const char *
partita_plan_result_json(const partita_plan_result *result);
/* The --explain-plan table; "" when not planned. */
PARTITA_C_EXPORT const char *
partita_plan_result_table(const partita_plan_result *result);

/*===----------------------------------------------------------------------===*
 * Artifacts
 *===----------------------------------------------------------------------===*/

PARTITA_C_EXPORT void partita_artifact_destroy(partita_artifact *artifact);
/* The plan as `partita-compile --report` writes it (partita-report/1 JSON,
 * NUL-terminated); "" for NULL. */
PARTITA_C_EXPORT const char *
partita_artifact_report(const partita_artifact *artifact);
/* Writes the artifact directory at `path` (replacing an artifact there,
 * refusing any other existing path); nothing is left on failure. */
PARTITA_C_EXPORT partita_status *
partita_artifact_save(const partita_artifact *artifact, const char *path);
/* The artifact's files (manifest.json, programs/..., weights/...), sorted by
 * path. */
PARTITA_C_EXPORT size_t
partita_artifact_file_count(const partita_artifact *artifact);
/* The file at `index`: its path relative to the artifact and its bytes; any
 * out-parameter may be NULL. */
PARTITA_C_EXPORT partita_status *
partita_artifact_file(const partita_artifact *artifact, size_t index,
                      const char **path, const void **data, size_t *size);

/*===----------------------------------------------------------------------===*
 * Sessions: running an artifact
 *===----------------------------------------------------------------------===*/

typedef struct partita_session partita_session;
typedef struct partita_session_options partita_session_options;

/* Threads per host rank 0 (the machine's cores shared among the ranks),
 * 120 s deadline on every wait between ranks, weight bytes not hashed at
 * load. */
PARTITA_C_EXPORT partita_session_options *partita_session_options_create(void);
PARTITA_C_EXPORT void
partita_session_options_destroy(partita_session_options *options);
/* Kernel threads per rank, at most 1024 (more is refused when the session
 * loads); a rank runs with fewer where the system gives fewer. */
PARTITA_C_EXPORT partita_status *
partita_session_options_set_threads_per_rank(partita_session_options *options,
                                             unsigned threads);
PARTITA_C_EXPORT partita_status *
partita_session_options_set_timeout_seconds(partita_session_options *options,
                                            double seconds);
/* Non-zero: also hash every weight byte against the manifest when loading
 * (as `partita-run --verify`); the manifest and programs are always
 * verified. */
PARTITA_C_EXPORT partita_status *
partita_session_options_set_verify_weights(partita_session_options *options,
                                           int verify);

/* A tensor in caller-owned memory, row-major and dense: an input to read or
 * an output to fill. `dtype` is a partita_dtype; `shape` has `rank`
 * entries (NULL allowed when rank is 0). */
typedef struct partita_tensor {
  const char *name;
  int dtype;
  int64_t rank;
  const int64_t *shape;
  void *data;
} partita_tensor;

/* Loads the artifact directory at `path`; `options` may be NULL. */
PARTITA_C_EXPORT partita_status *
partita_session_load_path(const char *path,
                          const partita_session_options *options,
                          partita_session **session);
/* Loads an artifact held in memory; the session does not keep `artifact`. */
PARTITA_C_EXPORT partita_status *
partita_session_load_artifact(const partita_artifact *artifact,
                              const partita_session_options *options,
                              partita_session **session);
PARTITA_C_EXPORT void partita_session_destroy(partita_session *session);

/* "host" or "cuda"; "" for NULL. */
PARTITA_C_EXPORT const char *
partita_session_target(const partita_session *session);
PARTITA_C_EXPORT size_t
partita_session_input_count(const partita_session *session);
PARTITA_C_EXPORT size_t
partita_session_output_count(const partita_session *session);
/* The input (output) at `index`: name, dtype, rank and global shape, with
 * `data` NULL. The strings and the shape belong to the session. */
PARTITA_C_EXPORT partita_status *
partita_session_input(const partita_session *session, size_t index,
                      partita_tensor *info);
PARTITA_C_EXPORT partita_status *
partita_session_output(const partita_session *session, size_t index,
                       partita_tensor *info);

/* Runs the model once: `inputs` names every model input and `outputs` every
 * output exactly once, with the dtype and shape the session reports. One
 * run at a time per session. */
PARTITA_C_EXPORT partita_status *
partita_session_run(partita_session *session, const partita_tensor *inputs,
                    size_t num_inputs, const partita_tensor *outputs,
                    size_t num_outputs);

/* Serving artifacts (compiled with --max-seq): greedy generation, the loop
 * in the runtime, the KV cache resident on the ranks. `input_ids` is i64
 * [batch, p] (p at most the compiled prompt length, the batch as compiled),
 * `attention_mask` i64 [batch, p] or NULL (all ones); rows of different
 * lengths are left-padded with a 0 mask. Writes batch * max_new_tokens
 * tokens, row-major, to `tokens`, which holds `capacity` of them. */
PARTITA_C_EXPORT partita_status *partita_session_generate(
    partita_session *session, const partita_tensor *input_ids,
    const partita_tensor *attention_mask, int64_t max_new_tokens,
    int64_t *tokens, size_t capacity);
/* The step API: prefill starts a generation and writes the last prompt
 * position's logits (f32 [batch, vocab]); step feeds one token per row (i64
 * [batch]) and writes its logits. A step before a prefill or with the
 * cache full is refused. */
PARTITA_C_EXPORT partita_status *partita_session_prefill(
    partita_session *session, const partita_tensor *input_ids,
    const partita_tensor *attention_mask, const partita_tensor *logits);
PARTITA_C_EXPORT partita_status *
partita_session_step(partita_session *session, const partita_tensor *tokens,
                     const partita_tensor *logits);

/* Training artifacts (compiled with --train): one optimizer step on a
 * batch, `batch` naming every batch input once (the model's inputs and
 * `labels` or `target`: the session's inputs but `lr`,
 * `bias_correction1` and `bias_correction2`, which the runtime computes),
 * at learning rate `lr` (NaN: the compiled one). Writes the loss before
 * the update to `*loss`. The ranks keep the parameters and optimizer
 * state between steps. */
PARTITA_C_EXPORT partita_status *
partita_session_train_step(partita_session *session,
                           const partita_tensor *batch, size_t num_batch,
                           double lr, float *loss);
/* The steps taken; 0 for an artifact that is not a training one. */
PARTITA_C_EXPORT int64_t
partita_session_training_steps(const partita_session *session);
/* A checkpoint of the parameters and optimizer state, written to a new
 * directory; loading one saved on the same mesh continues bit for bit. */
PARTITA_C_EXPORT partita_status *
partita_session_save_checkpoint(const partita_session *session,
                                const char *path);
PARTITA_C_EXPORT partita_status *
partita_session_load_checkpoint(partita_session *session, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* PARTITA_C_PARTITA_H */
