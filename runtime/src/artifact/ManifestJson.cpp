//===- ManifestJson.cpp - manifest.json of an artifact --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ManifestJson.h"

#include "partita/runtime/JsonDepth.h"

#include "partita/runtime/Sha256.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <exception>
#include <set>

using namespace partita::runtime;
namespace program = partita::program;
using json = nlohmann::ordered_json;

namespace {

constexpr const char *kFormatName = "partita-artifact";
constexpr const char *kHashField = "manifest_sha256";

/// The manifest's own digest: SHA-256 of its canonical text without the
/// `manifest_sha256` field, which is what Python's
/// `json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`
/// writes: keys sorted, no whitespace, UTF-8 (docs/artifact.md).
/// The role of an axis named `name` when the manifest gives none.
std::string defaultAxisRole(const std::string &name) {
  return name == "dp" || name == "tp" || name == "pp" || name == "sp" ||
                 name == "ep"
             ? name
             : "none";
}

std::string manifestDigest(const json &root) {
  json copy = root;
  if (copy.is_object())
    copy.erase(kHashField);
  // nlohmann::json (std::map) sorts keys by byte, which for UTF-8 is the
  // code point order Python sorts by.
  std::string canonical = nlohmann::json::parse(copy.dump()).dump();
  return "sha256:" + Sha256::hexDigest(canonical.data(), canonical.size());
}

/// A malformed manifest field; caught in manifestFromJson and returned as a
/// Status, so it never leaves this file.
struct ManifestError {
  std::string message;
};

[[noreturn]] void fail(const std::string &where, const std::string &what) {
  throw ManifestError{where + ": " + what};
}

const json &field(const json &object, const char *key,
                  const std::string &where) {
  if (!object.is_object())
    fail(where, "not a JSON object");
  auto it = object.find(key);
  if (it == object.end())
    fail(where, std::string("missing '") + key + "'");
  return *it;
}

std::string getString(const json &object, const char *key,
                      const std::string &where) {
  const json &value = field(object, key, where);
  if (!value.is_string())
    fail(where + "." + key, "not a string");
  return value.get<std::string>();
}

int64_t getInt(const json &value, const std::string &where) {
  if (!value.is_number_integer())
    fail(where, "not an integer");
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX))
    fail(where, "out of range");
  return value.get<int64_t>();
}

int64_t getInt(const json &object, const char *key, const std::string &where) {
  return getInt(field(object, key, where), where + "." + key);
}

int32_t getInt32(const json &object, const char *key,
                 const std::string &where) {
  int64_t value = getInt(object, key, where);
  if (value < INT32_MIN || value > INT32_MAX)
    fail(where + "." + key, "out of range");
  return int32_t(value);
}

/// A string or null (empty) member.
std::string getStringOrNull(const json &object, const char *key,
                            const std::string &where) {
  const json &value = field(object, key, where);
  if (value.is_null())
    return "";
  if (!value.is_string())
    fail(where + "." + key, "neither a string nor null");
  return value.get<std::string>();
}

const json &getArray(const json &object, const char *key,
                     const std::string &where) {
  const json &value = field(object, key, where);
  if (!value.is_array())
    fail(where + "." + key, "not an array");
  return value;
}

std::vector<std::string> getStrings(const json &array,
                                    const std::string &where) {
  if (!array.is_array())
    fail(where, "not an array");
  std::vector<std::string> strings;
  for (size_t i = 0; i < array.size(); ++i) {
    if (!array[i].is_string())
      fail(where + "[" + std::to_string(i) + "]", "not a string");
    strings.push_back(array[i].get<std::string>());
  }
  return strings;
}

TensorSpec parseTensorSpec(const json &object, const std::string &where) {
  TensorSpec spec;
  spec.name = getString(object, "name", where);
  std::string dtype = getString(object, "dtype", where);
  spec.dtype = dtypeFromName(dtype);
  if (spec.dtype == program::DTYPE_UNSPECIFIED)
    fail(where + ".dtype", "unknown dtype '" + dtype + "'");
  const json &shape = getArray(object, "shape", where);
  for (size_t i = 0; i < shape.size(); ++i)
    spec.shape.push_back(getInt(shape[i], where + ".shape"));
  const json &sharding = field(object, "sharding", where);
  const json &dims = getArray(sharding, "dims", where + ".sharding");
  for (size_t i = 0; i < dims.size(); ++i)
    spec.sharding.dims.push_back(getStrings(
        dims[i], where + ".sharding.dims[" + std::to_string(i) + "]"));
  spec.sharding.partial =
      getStrings(getArray(sharding, "partial", where + ".sharding"),
                 where + ".sharding.partial");
  if (object.contains("onnx_shape")) {
    const json &onnxShape = getArray(object, "onnx_shape", where);
    int64_t elements = 1, onnxElements = 1;
    for (int64_t size : spec.shape)
      elements *= size;
    for (size_t i = 0; i < onnxShape.size(); ++i) {
      spec.onnxShape.push_back(getInt(onnxShape[i], where + ".onnx_shape"));
      onnxElements *= spec.onnxShape.back();
    }
    if (onnxElements != elements)
      fail(where + ".onnx_shape", "does not hold the elements of its shape");
  }
  return spec;
}

json tensorSpecToJson(const TensorSpec &spec) {
  json dims = json::array();
  // Written with one entry per dimension, whether or not any is split.
  for (size_t i = 0; i < spec.shape.size(); ++i)
    dims.push_back(i < spec.sharding.dims.size() ? json(spec.sharding.dims[i])
                                                 : json::array());
  json object = {
      {"name", spec.name},
      {"dtype", dtypeName(spec.dtype)},
      {"shape", spec.shape},
      {"sharding", {{"dims", dims}, {"partial", spec.sharding.partial}}}};
  if (!spec.onnxShape.empty())
    object["onnx_shape"] = spec.onnxShape;
  return object;
}

std::vector<TensorSpec> parseTensorSpecs(const json &object, const char *key,
                                         const std::string &where) {
  const json &array = getArray(object, key, where);
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < array.size(); ++i)
    specs.push_back(parseTensorSpec(array[i], where + "." + key + "[" +
                                                  std::to_string(i) + "]"));
  return specs;
}

json tensorSpecsToJson(const std::vector<TensorSpec> &specs) {
  json array = json::array();
  for (const TensorSpec &spec : specs)
    array.push_back(tensorSpecToJson(spec));
  return array;
}

ServingSpec parseServing(const json &serving, const std::string &where) {
  if (!serving.is_object())
    fail(where, "not a JSON object");
  ServingSpec spec;
  spec.maxSeq = getInt(serving, "max_seq", where);
  spec.promptLength = getInt(serving, "prompt_length", where);
  spec.batch = getInt(serving, "batch", where);
  // Absent in artifacts written before right padding: left.
  if (serving.contains("padding")) {
    std::string padding = getString(serving, "padding", where);
    if (padding != "left" && padding != "right")
      fail(where + ".padding",
           "'" + padding + "' is neither 'left' nor 'right'");
    spec.rightPadded = padding == "right";
  }
  spec.inputIds = getString(serving, "input_ids", where);
  spec.attentionMask = getStringOrNull(serving, "attention_mask", where);
  spec.positionIds = getStringOrNull(serving, "position_ids", where);
  spec.cachePosition = getString(serving, "cache_position", where);
  spec.logits = getString(serving, "logits", where);
  spec.cache = parseTensorSpecs(serving, "cache", where);
  const json &decode = field(serving, "decode", where);
  spec.decodeInputs = parseTensorSpecs(decode, "inputs", where + ".decode");
  spec.decodeOutputs = parseTensorSpecs(decode, "outputs", where + ".decode");
  return spec;
}

TrainingSpec parseTraining(const json &training, const std::string &where) {
  if (!training.is_object())
    fail(where, "not a JSON object");
  TrainingSpec spec;
  spec.loss = getString(training, "loss", where);
  spec.lossKind = getString(training, "loss_kind", where);
  spec.classes = getInt(training, "classes", where);
  spec.optimizer = getString(training, "optimizer", where);
  const json &hyper = field(training, "hyperparameters", where);
  if (!hyper.is_object())
    fail(where + ".hyperparameters", "not a JSON object");
  for (auto it = hyper.begin(); it != hyper.end(); ++it) {
    if (!it.value().is_number())
      fail(where + ".hyperparameters." + it.key(), "not a number");
    spec.hyperparameters[it.key()] = it.value().get<double>();
  }
  const json &clip = field(training, "clip_grad_norm", where);
  if (!clip.is_number())
    fail(where + ".clip_grad_norm", "not a number");
  spec.clipGradNorm = clip.get<double>();
  spec.parameters = parseTensorSpecs(training, "parameters", where);
  spec.state = parseTensorSpecs(training, "state", where);
  return spec;
}

json trainingToJson(const TrainingSpec &spec) {
  json training = json::object();
  training["loss"] = spec.loss;
  training["loss_kind"] = spec.lossKind;
  training["classes"] = spec.classes;
  training["optimizer"] = spec.optimizer;
  training["hyperparameters"] = spec.hyperparameters;
  training["clip_grad_norm"] = spec.clipGradNorm;
  training["parameters"] = tensorSpecsToJson(spec.parameters);
  training["state"] = tensorSpecsToJson(spec.state);
  return training;
}

json servingToJson(const ServingSpec &spec) {
  auto nullable = [](const std::string &name) {
    return name.empty() ? json(nullptr) : json(name);
  };
  json decode = json::object();
  decode["inputs"] = tensorSpecsToJson(spec.decodeInputs);
  decode["outputs"] = tensorSpecsToJson(spec.decodeOutputs);
  json serving = json::object();
  serving["max_seq"] = spec.maxSeq;
  serving["prompt_length"] = spec.promptLength;
  serving["batch"] = spec.batch;
  serving["padding"] = spec.rightPadded ? "right" : "left";
  serving["input_ids"] = spec.inputIds;
  serving["attention_mask"] = nullable(spec.attentionMask);
  serving["position_ids"] = nullable(spec.positionIds);
  serving["cache_position"] = spec.cachePosition;
  serving["logits"] = spec.logits;
  serving["cache"] = tensorSpecsToJson(spec.cache);
  serving["decode"] = decode;
  return serving;
}

void parseManifest(const json &root, const std::string &where,
                   Manifest &manifest) {
  if (!root.is_object())
    fail(where, "not a JSON object");
  auto format = root.find("format");
  if (format == root.end() || !format->is_string() ||
      format->get<std::string>() != kFormatName)
    fail(where, std::string("not a Partita artifact manifest ('format' is "
                            "not \"") +
                    kFormatName + "\")");
  auto version = root.find("format_version");
  if (version == root.end() || !version->is_number_integer())
    fail(where, "no integer 'format_version'");
  if (version->get<int64_t>() != kArtifactFormatVersion)
    fail(where, "artifact format version " +
                    std::to_string(version->get<int64_t>()) +
                    " is not supported: this runtime reads version " +
                    std::to_string(kArtifactFormatVersion) +
                    "; run it with the partita-run of the compiler that "
                    "wrote it, or compile the model again");

  // Nothing but this digest covers the manifest itself: check it before
  // believing anything else the manifest says.
  auto digest = root.find(kHashField);
  if (digest == root.end() || !digest->is_string())
    fail(where, std::string("no '") + kHashField +
                    "' string (the digest of the manifest itself); compile "
                    "the model again with this partita-compile");
  if (digest->get<std::string>() != manifestDigest(root))
    fail(where, std::string("'") + kHashField +
                    "' does not match the manifest's contents (edited or "
                    "corrupted)");

  manifest.modelName =
      getString(field(root, "model", where), "name", where + ".model");
  manifest.target = getString(root, "target", where);

  const json &mesh = field(root, "mesh", where);
  const json &axes = getArray(mesh, "axes", where + ".mesh");
  for (size_t i = 0; i < axes.size(); ++i) {
    std::string at = where + ".mesh.axes[" + std::to_string(i) + "]";
    MeshAxis axis{getString(axes[i], "name", at), getInt(axes[i], "size", at),
                  defaultAxisRole(getString(axes[i], "name", at))};
    if (axes[i].contains("role"))
      axis.role = getString(axes[i], "role", at);
    manifest.meshAxes.push_back(std::move(axis));
  }
  manifest.worldSize = getInt32(mesh, "world_size", where + ".mesh");

  const json &ranks = getArray(root, "ranks", where);
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::string at = where + ".ranks[" + std::to_string(i) + "]";
    RankEntry entry;
    entry.rank = getInt32(ranks[i], "rank", at);
    const json &coords = field(ranks[i], "coords", at);
    if (!coords.is_object())
      fail(at + ".coords", "not a JSON object");
    for (auto it = coords.begin(); it != coords.end(); ++it)
      entry.coords.emplace_back(it.key(),
                                getInt(it.value(), at + ".coords." + it.key()));
    entry.stage = getInt32(ranks[i], "stage", at);
    entry.program = getString(ranks[i], "program", at);
    if (ranks[i].contains("decode_program"))
      entry.decodeProgram = getString(ranks[i], "decode_program", at);
    if (ranks[i].contains("cuda")) {
      const json &cuda = field(ranks[i], "cuda", at);
      entry.cudaSource = getString(cuda, "source", at + ".cuda");
      entry.cudaFatbin = getString(cuda, "fatbin", at + ".cuda");
      if (cuda.contains("decode_source"))
        entry.decodeCudaSource = getString(cuda, "decode_source", at + ".cuda");
      if (cuda.contains("decode_fatbin"))
        entry.decodeCudaFatbin = getString(cuda, "decode_fatbin", at + ".cuda");
    }
    manifest.ranks.push_back(std::move(entry));
  }

  manifest.weightFiles =
      getStrings(getArray(root, "weights", where), where + ".weights");
  manifest.inputs = parseTensorSpecs(root, "inputs", where);
  manifest.outputs = parseTensorSpecs(root, "outputs", where);

  // A serving artifact has a decode program on every rank; an ordinary one
  // has none (the writer fills these in, so they are checked here).
  if (root.contains("serving"))
    manifest.serving = parseServing(root["serving"], where + ".serving");
  if (root.contains("training"))
    manifest.training = parseTraining(root["training"], where + ".training");
  for (size_t i = 0; i < manifest.ranks.size(); ++i) {
    std::string at = where + ".ranks[" + std::to_string(i) + "]";
    bool named = !manifest.ranks[i].decodeProgram.empty();
    if (manifest.serving && !named)
      fail(at, "missing 'decode_program' (a serving artifact has one per "
               "rank)");
    if (!manifest.serving && named)
      fail(at + ".decode_program",
           "a decode program in a manifest without 'serving'");
  }

  if (root.contains("cuda"))
    manifest.cudaArchs = getStrings(
        getArray(field(root, "cuda", where), "archs", where + ".cuda"),
        where + ".cuda.archs");

  const json &schedule = field(root, "schedule", where);
  if (!schedule.is_null() && !schedule.is_object())
    fail(where + ".schedule", "neither an object nor null");
  manifest.scheduleJson = schedule.is_null() ? "" : schedule.dump();

  const json &options = field(root, "compile_options", where);
  if (!options.is_object())
    fail(where + ".compile_options", "not a JSON object");
  for (auto it = options.begin(); it != options.end(); ++it) {
    if (!it.value().is_string())
      fail(where + ".compile_options." + it.key(), "not a string");
    manifest.compileOptions[it.key()] = it.value().get<std::string>();
  }

  const json &files = field(root, "files", where);
  if (!files.is_object())
    fail(where + ".files", "not a JSON object");
  for (auto it = files.begin(); it != files.end(); ++it) {
    if (!it.value().is_string())
      fail(where + ".files." + it.key(), "not a string");
    manifest.files[it.key()] = it.value().get<std::string>();
  }
}

Status checkSharding(const TensorSpec &spec, const std::string &where,
                     const std::set<std::string> &axisNames) {
  const TensorSharding &sharding = spec.sharding;
  if (!sharding.dims.empty() && sharding.dims.size() != spec.shape.size())
    return Status::error(
        where + ": sharding names " + std::to_string(sharding.dims.size()) +
        " dimensions, the shape has " + std::to_string(spec.shape.size()));
  std::set<std::string> used;
  auto use = [&](const std::string &axis) -> Status {
    if (!axisNames.count(axis))
      return Status::error(where + ": sharding names '" + axis +
                           "', which is not a mesh axis");
    if (!used.insert(axis).second)
      return Status::error(where + ": sharding uses mesh axis '" + axis +
                           "' twice");
    return Status::ok();
  };
  for (const std::vector<std::string> &axes : sharding.dims)
    for (const std::string &axis : axes)
      PARTITA_RETURN_IF_ERROR(use(axis));
  for (const std::string &axis : sharding.partial)
    PARTITA_RETURN_IF_ERROR(use(axis));
  return Status::ok();
}

Status checkTensorSpecs(const std::vector<TensorSpec> &specs,
                        const std::string &kind,
                        const std::set<std::string> &axisNames) {
  std::set<std::string> names;
  for (const TensorSpec &spec : specs) {
    std::string where = kind + " '" + spec.name + "'";
    if (spec.name.empty())
      return Status::error(kind + " with an empty name");
    if (!names.insert(spec.name).second)
      return Status::error(where + " is listed twice");
    if (spec.dtype == program::DTYPE_UNSPECIFIED)
      return Status::error(where + " has no dtype");
    for (int64_t dim : spec.shape)
      if (dim < 0)
        return Status::error(where + " has a negative dimension in " +
                             shapeString(spec.shape));
    PARTITA_RETURN_IF_ERROR(checkSharding(spec, where, axisNames));
  }
  return Status::ok();
}

/// The training spec's names: the loss is an output, the learning rate an
/// input, and no parameter or state is also an input or output.
Status checkTraining(const Manifest &manifest,
                     const std::set<std::string> &axisNames) {
  const TrainingSpec &training = *manifest.training;
  if (training.optimizer != "sgd" && training.optimizer != "adamw")
    return Status::error("training: optimizer '" + training.optimizer +
                         "' is neither sgd nor adamw");
  if (training.classes < 0)
    return Status::error("training: classes must be 0 or more");
  if (!std::isfinite(training.clipGradNorm) || training.clipGradNorm < 0)
    return Status::error("training: clip_grad_norm must be 0 or more");
  for (const auto &[name, value] : training.hyperparameters)
    if (!std::isfinite(value))
      return Status::error("training: hyperparameter '" + name +
                           "' is not finite");
  if (!findSpec(manifest.outputs, training.loss))
    return Status::error("training: the loss '" + training.loss +
                         "' is not an output");
  if (!findSpec(manifest.inputs, "lr"))
    return Status::error("training: the step takes no input 'lr'");
  if (manifest.serving)
    return Status::error("an artifact is either a training or a serving one");
  PARTITA_RETURN_IF_ERROR(
      checkTensorSpecs(training.parameters, "parameter", axisNames));
  PARTITA_RETURN_IF_ERROR(checkTensorSpecs(training.state, "state", axisNames));
  for (const std::vector<TensorSpec> *list :
       {&training.parameters, &training.state})
    for (const TensorSpec &spec : *list)
      if (findSpec(manifest.inputs, spec.name) ||
          findSpec(manifest.outputs, spec.name) ||
          (list == &training.state && findSpec(training.parameters, spec.name)))
        return Status::error("training: '" + spec.name +
                             "' is listed twice; the runtime binds the "
                             "parameters and state itself");
  return Status::ok();
}

/// The serving spec's own sizes and names, and that each name it gives is
/// an input or output of the entries that use it.
Status checkServing(const Manifest &manifest,
                    const std::set<std::string> &axisNames) {
  const ServingSpec &serving = *manifest.serving;
  if (serving.maxSeq < 1 || serving.promptLength < 1 || serving.batch < 1)
    return Status::error("serving: max_seq " + std::to_string(serving.maxSeq) +
                         ", prompt_length " +
                         std::to_string(serving.promptLength) + " and batch " +
                         std::to_string(serving.batch) +
                         " must all be positive");
  if (serving.promptLength > serving.maxSeq)
    return Status::error("serving: the prompt length " +
                         std::to_string(serving.promptLength) +
                         " exceeds max_seq " + std::to_string(serving.maxSeq));
  if (serving.cache.empty())
    return Status::error("serving lists no cache tensors");
  PARTITA_RETURN_IF_ERROR(checkTensorSpecs(serving.cache, "cache", axisNames));
  PARTITA_RETURN_IF_ERROR(
      checkTensorSpecs(serving.decodeInputs, "decode input", axisNames));
  PARTITA_RETURN_IF_ERROR(
      checkTensorSpecs(serving.decodeOutputs, "decode output", axisNames));
  auto listed = [](const std::vector<TensorSpec> &specs,
                   const std::string &name) {
    for (const TensorSpec &spec : specs)
      if (spec.name == name)
        return true;
    return false;
  };
  // The runtime binds the cache itself: a cache listed as an input or
  // output would be bound twice.
  for (const TensorSpec &cache : serving.cache)
    for (const auto &[specs, kind] :
         {std::pair(&manifest.inputs, "an input"),
          std::pair(&manifest.outputs, "an output"),
          std::pair(&serving.decodeInputs, "a decode input"),
          std::pair(&serving.decodeOutputs, "a decode output")})
      if (listed(*specs, cache.name))
        return Status::error("cache '" + cache.name + "' is also " + kind +
                             "; the runtime binds the cache, so it is "
                             "neither");
  auto require = [&](const char *member, const std::string &name,
                     const std::vector<TensorSpec> &specs,
                     const char *what) -> Status {
    if (name.empty() || !listed(specs, name))
      return Status::error(std::string("serving.") + member + " names '" +
                           name + "', which the " + what + " do not list");
    return Status::ok();
  };
  PARTITA_RETURN_IF_ERROR(
      require("input_ids", serving.inputIds, manifest.inputs, "inputs"));
  PARTITA_RETURN_IF_ERROR(require("input_ids", serving.inputIds,
                                  serving.decodeInputs, "decode inputs"));
  PARTITA_RETURN_IF_ERROR(
      require("logits", serving.logits, manifest.outputs, "outputs"));
  PARTITA_RETURN_IF_ERROR(require("logits", serving.logits,
                                  serving.decodeOutputs, "decode outputs"));
  // The others are optional: a model may take them in one program only
  // (or, for the mask and positions, not at all).
  for (const auto &[member, name] :
       {std::pair("attention_mask", &serving.attentionMask),
        std::pair("position_ids", &serving.positionIds),
        std::pair("cache_position", &serving.cachePosition)})
    if (!name->empty() && !listed(manifest.inputs, *name) &&
        !listed(serving.decodeInputs, *name))
      return Status::error(std::string("serving.") + member + " names '" +
                           *name +
                           "', which neither the inputs nor the decode "
                           "inputs list");
  return Status::ok();
}

} // namespace

bool TensorSharding::isReplicated() const {
  for (const std::vector<std::string> &axes : dims)
    if (!axes.empty())
      return false;
  return partial.empty();
}

std::vector<const TensorSpec *>
partita::runtime::residentSpecs(const Manifest &manifest) {
  std::vector<const TensorSpec *> specs;
  if (manifest.serving)
    for (const TensorSpec &spec : manifest.serving->cache)
      specs.push_back(&spec);
  if (manifest.training)
    for (const auto *list :
         {&manifest.training->parameters, &manifest.training->state})
      for (const TensorSpec &spec : *list)
        specs.push_back(&spec);
  return specs;
}

const TensorSpec *
partita::runtime::findSpec(const std::vector<TensorSpec> &specs,
                           const std::string &name) {
  for (const TensorSpec &spec : specs)
    if (spec.name == name)
      return &spec;
  return nullptr;
}

bool partita::runtime::isSafeRelativePath(const std::string &path) {
  if (path.empty() || path.front() == '/')
    return false;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string component = path.substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    if (component.empty() || component == "." || component == "..")
      return false;
    if (slash == std::string::npos)
      return true;
    start = slash + 1;
  }
}

Status partita::runtime::validateManifest(const Manifest &manifest) {
  if (manifest.target != "host" && manifest.target != "cuda")
    return Status::error("target '" + manifest.target +
                         "' is neither 'host' nor 'cuda'");
  if (manifest.worldSize < 1)
    return Status::error("world size " + std::to_string(manifest.worldSize) +
                         " is not positive");
  std::set<std::string> axisNames;
  int64_t meshSize = 1;
  for (const MeshAxis &axis : manifest.meshAxes) {
    if (axis.name.empty() || !axisNames.insert(axis.name).second)
      return Status::error("mesh axis names must be distinct and non-empty");
    if (axis.size < 1)
      return Status::error("mesh axis '" + axis.name + "' has size " +
                           std::to_string(axis.size));
    if (axis.role != "none" && defaultAxisRole(axis.role) != axis.role)
      return Status::error("mesh axis '" + axis.name + "' has role '" +
                           axis.role +
                           "'; roles are dp, tp, pp, sp, ep and none");
    if (__builtin_mul_overflow(meshSize, axis.size, &meshSize))
      return Status::error("the mesh is too large");
  }
  if (meshSize != manifest.worldSize)
    return Status::error("the mesh holds " + std::to_string(meshSize) +
                         " ranks, the world size is " +
                         std::to_string(manifest.worldSize));
  if (manifest.ranks.size() != size_t(manifest.worldSize))
    return Status::error(
        "the manifest lists " + std::to_string(manifest.ranks.size()) +
        " ranks for a world of " + std::to_string(manifest.worldSize));
  for (size_t i = 0; i < manifest.ranks.size(); ++i) {
    const RankEntry &entry = manifest.ranks[i];
    std::string where = "rank " + std::to_string(entry.rank);
    if (entry.rank != int32_t(i))
      return Status::error("ranks must be listed in order: entry " +
                           std::to_string(i) + " is " + where);
    if (entry.coords.size() != manifest.meshAxes.size())
      return Status::error(where + " has " +
                           std::to_string(entry.coords.size()) +
                           " coordinates for a mesh of " +
                           std::to_string(manifest.meshAxes.size()) + " axes");
    for (size_t a = 0; a < entry.coords.size(); ++a) {
      const MeshAxis &axis = manifest.meshAxes[a];
      const auto &[name, coord] = entry.coords[a];
      if (name != axis.name)
        return Status::error(where + ": coordinate '" + name +
                             "' where mesh axis '" + axis.name +
                             "' was expected");
      if (coord < 0 || coord >= axis.size)
        return Status::error(where + ": coordinate " + name + "=" +
                             std::to_string(coord) + " is outside the axis");
    }
    if (entry.stage < 0)
      return Status::error(where + " has a negative stage");
    bool cuda = manifest.target == "cuda";
    if (cuda && (entry.cudaSource.empty() || entry.cudaFatbin.empty()))
      return Status::error(where + " of a cuda artifact names no CUDA "
                                   "source and fatbin");
    if (!cuda &&
        (!entry.cudaSource.empty() || !entry.cudaFatbin.empty() ||
         !entry.decodeCudaSource.empty() || !entry.decodeCudaFatbin.empty()))
      return Status::error(where + " of a host artifact names CUDA files");
    bool decodeNamed =
        !entry.decodeCudaSource.empty() || !entry.decodeCudaFatbin.empty();
    if (cuda && manifest.serving &&
        (entry.decodeCudaSource.empty() || entry.decodeCudaFatbin.empty()))
      return Status::error(where + " of a cuda serving artifact names no "
                                   "decode CUDA source and fatbin");
    if (!manifest.serving && decodeNamed)
      return Status::error(where + " names decode CUDA files, but the "
                                   "artifact is not a serving one");
  }
  if ((manifest.target == "cuda") == manifest.cudaArchs.empty())
    return Status::error(manifest.target == "cuda"
                             ? "a cuda artifact lists no CUDA architectures"
                             : "a host artifact lists CUDA architectures");
  PARTITA_RETURN_IF_ERROR(
      checkTensorSpecs(manifest.inputs, "input", axisNames));
  PARTITA_RETURN_IF_ERROR(
      checkTensorSpecs(manifest.outputs, "output", axisNames));
  if (manifest.training)
    PARTITA_RETURN_IF_ERROR(checkTraining(manifest, axisNames));
  if (manifest.serving)
    return checkServing(manifest, axisNames);
  return Status::ok();
}

Status partita::runtime::manifestToJson(const Manifest &manifest,
                                        std::string &text) {
  try {
    json axes = json::array();
    for (const MeshAxis &axis : manifest.meshAxes) {
      json entry = {{"name", axis.name}, {"size", axis.size}};
      if (axis.role != defaultAxisRole(axis.name))
        entry["role"] = axis.role;
      axes.push_back(std::move(entry));
    }
    json ranks = json::array();
    for (const RankEntry &entry : manifest.ranks) {
      json coords = json::object();
      for (const auto &[name, coord] : entry.coords)
        coords[name] = coord;
      json rank = {{"rank", entry.rank},
                   {"coords", coords},
                   {"stage", entry.stage},
                   {"program", entry.program}};
      if (!entry.decodeProgram.empty())
        rank["decode_program"] = entry.decodeProgram;
      if (!entry.cudaSource.empty() || !entry.cudaFatbin.empty())
        rank["cuda"] = {{"source", entry.cudaSource},
                        {"fatbin", entry.cudaFatbin}};
      if (!entry.decodeCudaSource.empty() || !entry.decodeCudaFatbin.empty()) {
        rank["cuda"]["decode_source"] = entry.decodeCudaSource;
        rank["cuda"]["decode_fatbin"] = entry.decodeCudaFatbin;
      }
      ranks.push_back(std::move(rank));
    }
    json schedule = nullptr;
    if (!manifest.scheduleJson.empty()) {
      if (std::string deep =
              checkJsonDepth(manifest.scheduleJson, "the schedule");
          !deep.empty())
        return Status::error(deep);
      schedule = json::parse(manifest.scheduleJson, nullptr,
                             /*allow_exceptions=*/false);
      if (schedule.is_discarded() || !schedule.is_object())
        return Status::error("the schedule is not a JSON object");
    }
    json root = json::object();
    root["format"] = kFormatName;
    root["format_version"] = kArtifactFormatVersion;
    root["model"] = {{"name", manifest.modelName}};
    root["target"] = manifest.target;
    root["mesh"] = {{"axes", axes}, {"world_size", manifest.worldSize}};
    root["ranks"] = ranks;
    root["weights"] = manifest.weightFiles;
    root["inputs"] = tensorSpecsToJson(manifest.inputs);
    root["outputs"] = tensorSpecsToJson(manifest.outputs);
    if (manifest.serving)
      root["serving"] = servingToJson(*manifest.serving);
    if (manifest.training)
      root["training"] = trainingToJson(*manifest.training);
    if (!manifest.cudaArchs.empty())
      root["cuda"] = {{"archs", manifest.cudaArchs}};
    root["schedule"] = schedule;
    root["compile_options"] = manifest.compileOptions;
    root["files"] = manifest.files;
    root[kHashField] = manifestDigest(root);
    text = root.dump(2) + "\n";
  } catch (const std::exception &e) {
    // Strings that are not UTF-8 are what the JSON writer refuses.
    return Status::error(std::string("cannot write manifest.json: ") +
                         e.what());
  }
  return Status::ok();
}

Status partita::runtime::manifestFromJson(const std::string &text,
                                          const std::string &where,
                                          Manifest &manifest) {
  // Before the parser, which recurses once per level.
  if (std::string deep = checkJsonDepth(text, where); !deep.empty())
    return Status::error(deep);
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return Status::error(where + ": not valid JSON");
  Manifest parsed;
  try {
    parseManifest(root, where, parsed);
  } catch (const ManifestError &error) {
    return Status::error(error.message);
  } catch (const std::exception &e) {
    return Status::error(where + ": " + e.what());
  }
  Status valid = validateManifest(parsed);
  if (!valid)
    return Status::error(where + ": " + valid.message());
  manifest = std::move(parsed);
  return Status::ok();
}
