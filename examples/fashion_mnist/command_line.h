// Command-line parsing shared by the example trainers.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_

#include <boost/program_options.hpp>
#include <string>

#include "trainer_base.h"

namespace fmnist {

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
// stray word is an error, not ignored. Returns "" or the parser's message.
inline std::string ParseCommandLine(const boost::program_options::options_description& desc,
                                    int argc, char** argv,
                                    boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  try {
    po::positional_options_description none;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(none).run(), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_
