// Blocks (docs/scenario-format.md "Blocks: N layers without copy-paste"): a block of steps, with
// the tensors they own, written once under [blocks.NAME] and instantiated in [[steps]] by an
// entry { block = NAME, repeat = L, input, output[, first_layer] } as L layers. Expansion happens
// on the parsed document, before anything else reads it: each layer's tensors are appended to
// [[tensors]] and its steps replace the entry in [[steps]], with every string value's
// placeholders substituted:
//   {layer}   the layer's number: first_layer, first_layer + 1, ...
//   {input}   layer first_layer's: the entry's `input`; a later layer's: the previous layer's
//             {output}
//   {output}  the last layer's: the entry's `output`; an earlier layer's: the block's `output`
//             template with {layer} substituted
// The copies keep their source positions, so an error in an expanded step or tensor points at
// its line in the block; its key path is its index in the expanded program (what explain and
// the reports show).
#include <set>
#include <string>
#include <vector>

#include "scenario/loader.hpp"

namespace shardsim {

namespace {

struct Layer {
  std::string number, input, output;
};

// Substitutes the placeholders in `text` (a string value at `at`); an unknown {NAME} or an
// unclosed '{' is refused.
std::string substitute(const TomlReader& r, const std::string& text, const Layer& layer,
                       const toml::node& at, const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '{') {
      out += text[i++];
      continue;
    }
    const std::size_t close = text.find('}', i);
    const std::string name = close == std::string::npos ? "" : text.substr(i + 1, close - i - 1);
    if (name == "layer") {
      out += layer.number;
    } else if (name == "input") {
      out += layer.input;
    } else if (name == "output") {
      out += layer.output;
    } else {
      r.fail(at, path,
             "unknown placeholder " + quote(text.substr(i, close == std::string::npos
                                                            ? std::string::npos
                                                            : close - i + 1)) +
               " in a block (placeholders: {layer}, {input}, {output})");
    }
    i = close + 1;
  }
  return out;
}

// Substitutes every string value of `copy` (a table, an array or a string, recursively), which
// is a copy of `original`: a message points at the original, which has a position.
void substitute_all(const TomlReader& r, toml::node& copy, const toml::node& original,
                    const std::string& path, const Layer& layer) {
  if (auto* s = copy.as_string()) {
    s->get() = substitute(r, s->get(), layer, original, path);
  } else if (auto* t = copy.as_table()) {
    for (auto&& [key, value] : *t) {
      substitute_all(r, value, *original.as_table()->get(key.str()),
                     path + "." + std::string(key.str()), layer);
    }
  } else if (auto* a = copy.as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      substitute_all(r, *a->get(i), *original.as_array()->get(i),
                     path + "[" + std::to_string(i) + "]", layer);
    }
  }
}

// A copy's original, by its index in the expanded [[steps]] or [[tensors]].
struct Copied {
  std::vector<std::pair<std::size_t, const toml::node*>> steps, tensors;
  std::set<std::string> used;  // the blocks some entry instantiates
};

void instantiate(const TomlReader& r, const toml::table& use, const std::string& path,
                 const toml::table& blocks, toml::array& steps, toml::array& tensors,
                 Copied& copied) {
  r.check_keys(use, path, {"block", "repeat", "input", "output", "first_layer"});
  const std::string name = r.string(*use.get("block"), path + ".block");
  const toml::node* found = blocks.get(name);
  if (!found) {
    std::vector<std::string> names;
    for (auto&& [key, node] : blocks) names.emplace_back(key.str());
    const std::string hint = nearest(name, names);
    r.fail(*use.get("block"), path + ".block",
         "no block " + quote(name) + " in [blocks]" +
             (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)"));
  }
  for (const char* key : {"repeat", "input", "output"}) {
    if (!use.get(key)) r.fail(use, path, "missing required key '" + std::string(key) + "'");
  }
  const std::int64_t repeat = r.integer(*use.get("repeat"), path + ".repeat");
  if (repeat < 1 || repeat > 1000) {
    r.fail(*use.get("repeat"), path + ".repeat", "repeat is in [1, 1000]");
  }
  std::int64_t first = 0;
  if (const toml::node* v = use.get("first_layer")) {
    first = r.integer(*v, path + ".first_layer");
    if (first < 0 || first > 1000000) {
      r.fail(*v, path + ".first_layer", "first_layer is in [0, 1000000]");
    }
  }
  copied.used.insert(name);
  const std::string block_path = "blocks." + name;
  const toml::table& block = *found->as_table();
  const std::string output = *block.get("output")->value<std::string>();
  const toml::array& body = r.array(*block.get("steps"), block_path + ".steps");
  if (body.empty()) r.fail(*block.get("steps"), block_path + ".steps", "a block has steps");
  const toml::array no_tensors;
  const toml::array& owned = block.get("tensors")
                                 ? r.array(*block.get("tensors"), block_path + ".tensors")
                                 : no_tensors;
  Layer layer{"", r.string(*use.get("input"), path + ".input"), ""};
  for (std::int64_t l = first; l < first + repeat; ++l) {
    layer.number = std::to_string(l);
    const Layer named{layer.number, layer.input, ""};
    layer.output = l + 1 < first + repeat
                       ? substitute(r, output, named, *block.get("output"), block_path + ".output")
                       : r.string(*use.get("output"), path + ".output");
    const auto copy = [&](const toml::array& list, const std::string& what, toml::array& into,
                          std::vector<std::pair<std::size_t, const toml::node*>>& originals) {
      for (std::size_t k = 0; k < list.size(); ++k) {
        const std::string at = what + "[" + std::to_string(k) + "]";
        if (!list.get(k)->is_table()) r.fail(*list.get(k), at, "expected a table");
        if (list.get(k)->as_table()->get("block")) {
          r.fail(*list.get(k), at, "a block's step cannot instantiate another block");
        }
        toml::table instance = *list.get(k)->as_table();
        substitute_all(r, instance, *list.get(k), at, layer);
        originals.emplace_back(into.size(), list.get(k));
        into.push_back(std::move(instance));
      }
    };
    copy(owned, block_path + ".tensors", tensors, copied.tensors);
    copy(body, block_path + ".steps", steps, copied.steps);
    layer.input = layer.output;
  }
}

// Maps every node of `copy` to the position of its counterpart in `original` (same structure).
void record_origins(const toml::node& copy, const toml::node& original, NodeOrigins& origins) {
  origins[&copy] = loc_of(original);
  if (const auto* t = copy.as_table()) {
    for (auto&& [key, value] : *t) {
      if (const toml::node* o = original.as_table()->get(key.str())) {
        record_origins(value, *o, origins);
      }
    }
  } else if (const auto* a = copy.as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      record_origins(*a->get(i), *original.as_array()->get(i), origins);
    }
  }
}

}  // namespace

void Loader::expand_blocks(toml::table& root, NodeOrigins& origins) const {
  const toml::node* blocks_node = root.get("blocks");
  if (!blocks_node) return;
  const toml::table& blocks = table(*blocks_node, "blocks");
  for (auto&& [key, node] : blocks) {
    const std::string path = "blocks." + std::string(key.str());
    const toml::table& block = table(node, path);
    check_keys(block, path, {"output", "tensors", "steps"});
    if (!block.get("steps")) fail(node, path, "missing required key 'steps'");
    if (!block.get("output")) fail(node, path, "missing required key 'output'");
    const std::string output = string(*block.get("output"), path + ".output");
    if (output.find("{layer}") == std::string::npos) {
      fail(*block.get("output"), path + ".output",
           "a block's output names each layer's result: it must contain {layer}");
    }
  }
  // The layers' tensors are appended to [[tensors]] in place (the declared ones keep their
  // nodes); [[steps]] is rebuilt, each written entry copied and each block entry expanded.
  if (!root.get("tensors")) root.insert("tensors", toml::array());
  array(*root.get("tensors"), "tensors");  // refused unless an array
  toml::array& tensors = *root.get("tensors")->as_array();
  toml::array steps;
  Copied copied;
  if (const toml::node* steps_node = root.get("steps")) {
    const toml::array& written = array(*steps_node, "steps");
    for (std::size_t i = 0; i < written.size(); ++i) {
      const toml::node& entry = *written.get(i);
      const toml::table* use = entry.as_table();
      if (!use || !use->get("block")) {
        copied.steps.emplace_back(steps.size(), &entry);
        steps.push_back(entry);
        continue;
      }
      instantiate(*this, *use, "steps[" + std::to_string(i) + "]", blocks, steps, tensors,
                  copied);
    }
  }
  // Every copy mapped to its original's position while the originals live; the copies keep
  // their addresses from here on (arrays and tables hold their elements by pointer).
  // A block no entry instantiates would be read by nothing: refused, as any unread key.
  for (auto&& [key, node] : blocks) {
    const std::string name(key.str());
    if (!copied.used.count(name)) {
      fail(node, "blocks." + name,
           "block " + quote(name) + " is defined but no [[steps]] entry instantiates it "
           "({ block = \"" + name + "\", repeat = N, input, output })");
    }
  }
  for (const auto& [index, original] : copied.steps) {
    record_origins(*steps.get(index), *original, origins);
  }
  for (const auto& [index, original] : copied.tensors) {
    record_origins(*tensors.get(index), *original, origins);
  }
  root.insert_or_assign("steps", std::move(steps));
  root.erase("blocks");
}

}  // namespace shardsim
