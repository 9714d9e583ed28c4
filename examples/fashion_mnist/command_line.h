// Command-line parsing shared by the example trainers.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainer_base.h"

namespace fmnist {

// The trainers' exit statuses: 0 trained (or --help), these otherwise.
constexpr int kExitRuntimeError = 1;  // libgeeps failed (or, softmax_fmnist, the data)
constexpr int kExitUsage = 2;         // bad command line

// What both trainers' command lines have besides TrainerOptions.
struct CommonFlags {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_limit = 0;  // 0 = all
  int64_t timeout_ms = 0;   // the trainer's default, shown by --help
  std::string lr_schedule = "step";
  bool processes = false;
  std::set<std::string> given;  // options given on the command line
};

// Writes "<program>: <message>" and the pointer to --help to stderr;
// returns kExitUsage.
inline int UsageError(const std::string& program, const std::string& message) {
  std::cerr << program << ": " << message << "\n"
            << "Try '" << program << " --help'.\n";
  return kExitUsage;
}

// Adds --data-dir, --train-limit, --timeout-ms and --processes (with
// `processes_help`) to `add`.
inline void AddCommonFlags(boost::program_options::options_description_easy_init& add,
                           CommonFlags* f, const char* processes_help) {
  namespace po = boost::program_options;
  // clang-format off
  add("processes", po::bool_switch(&f->processes), processes_help)
     ("data-dir", po::value(&f->data_dir)->default_value(f->data_dir),
      "folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz")
     ("train-limit", po::value(&f->train_limit)->default_value(f->train_limit),
      "use only the first N training examples (0 = all)")
     ("timeout-ms", po::value(&f->timeout_ms)->default_value(f->timeout_ms),
      "longest wait for a peer before libgeeps gives up");
  // clang-format on
}

// Warns on stderr of each of --workers and --shards given with --processes
// (one worker and one shard per process there).
inline void WarnIgnoredWithProcesses(const std::string& program, const CommonFlags& f) {
  for (const char* ignored : {"workers", "shards"}) {
    if (f.given.count(ignored) != 0) {
      std::cerr << program << ": --" << ignored << " is ignored with --processes\n";
    }
  }
}

// Adds the flags of TrainerOptions but --workers and --shards (whose help
// differs per trainer) to `add`: --channels, --epochs, --batch-size (with
// `batch_help`), --lr, --lr-decay, --lr-schedule (into *schedule: give it to
// ParseLrSchedule after parsing), --momentum, --slack and --seed.
inline void AddTrainerFlags(boost::program_options::options_description_easy_init& add,
                            TrainerOptions* o, const char* batch_help, std::string* schedule) {
  namespace po = boost::program_options;
  // clang-format off
  add("channels", po::value(&o->channels)->default_value(o->channels),
      "channels (sockets + threads) per shard and worker")
     ("epochs", po::value(&o->epochs)->default_value(o->epochs),
      "passes over the training data")
     ("batch-size", po::value(&o->batch_size)->default_value(o->batch_size), batch_help)
     ("lr", po::value(&o->learning_rate)->default_value(o->learning_rate),
      "learning rate (of the step on the workers' average gradient)")
     ("lr-decay", po::value(&o->lr_decay)->default_value(o->lr_decay),
      "learning rate factor per epoch (step schedule): lr * lr-decay^epoch")
     ("lr-schedule", po::value(schedule)->default_value(*schedule),
      "step (times --lr-decay per epoch) or cosine (per iteration, from --lr "
      "down to 0 at the end of the last epoch)")
     ("momentum", po::value(&o->momentum)->default_value(o->momentum),
      "momentum (kept by each worker, applied before sending; 0 = plain SGD)")
     ("slack", po::value(&o->slack)->default_value(o->slack),
      "staleness bound of the parameter reads in clocks (0 = BSP)")
     ("seed", po::value(&o->seed)->default_value(o->seed),
      "seed of the initial weights and of the shuffles");
  // clang-format on
}

// Parses argv against `desc` into `vm`. There are no positional arguments: a
// stray word is an error, not ignored. A flag given more than once takes its
// last value, so that arguments appended to a script's defaults win
// (scripts/run-example.sh --epochs 2). Returns "" or the parser's message.
inline std::string ParseCommandLine(const boost::program_options::options_description& desc,
                                    int argc, char** argv,
                                    boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  try {
    po::positional_options_description none;
    po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(desc).positional(none).run();
    std::map<std::string, size_t> last;
    for (size_t i = 0; i < parsed.options.size(); ++i) last[parsed.options[i].string_key] = i;
    std::vector<po::option> kept;
    for (size_t i = 0; i < parsed.options.size(); ++i) {
      if (last[parsed.options[i].string_key] == i) kept.push_back(parsed.options[i]);
    }
    parsed.options = std::move(kept);
    po::store(parsed, *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    return e.what();
  }
  return "";
}

// Parses argv against `desc` (which has the flags of AddTrainerFlags and
// AddCommonFlags, into *o and *f) and checks what they share: --help prints
// `desc`; --train-limit, --timeout-ms (into o->timeout) and --lr-schedule
// (into o->lr_schedule). Returns -1 to go on, else the exit status (0 after
// --help, kExitUsage after a UsageError).
inline int ParseTrainerCommandLine(const std::string& program,
                                   const boost::program_options::options_description& desc,
                                   int argc, char** argv, CommonFlags* f, TrainerOptions* o) {
  boost::program_options::variables_map vm;
  if (const std::string error = ParseCommandLine(desc, argc, argv, &vm); !error.empty()) {
    return UsageError(program, error);
  }
  if (vm.count("help") != 0) {
    std::cout << desc << "\n";
    return 0;
  }
  for (const auto& [name, value] : vm) {
    if (!value.defaulted()) f->given.insert(name);
  }
  if (f->train_limit < 0) return UsageError(program, "--train-limit must be >= 0");
  if (f->timeout_ms <= 0) return UsageError(program, "--timeout-ms must be > 0");
  o->timeout = std::chrono::milliseconds(f->timeout_ms);
  if (!ParseLrSchedule(f->lr_schedule, &o->lr_schedule)) {
    return UsageError(program, "--lr-schedule must be step or cosine");
  }
  return -1;
}

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_
