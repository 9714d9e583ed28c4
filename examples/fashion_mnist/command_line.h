// Command-line parsing shared by the example trainers.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_COMMAND_LINE_H_

#include <boost/program_options.hpp>
#include <string>

namespace fmnist {

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
