// The network trainer's progress bar (worker 0): redrawn in place on a
// terminal, otherwise only the epoch's final line.
#ifndef GEEPS_EXAMPLES_FASHION_MNIST_PROGRESS_BAR_H_
#define GEEPS_EXAMPLES_FASHION_MNIST_PROGRESS_BAR_H_

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>

namespace fmnist {

class ProgressBar {
 public:
  ProgressBar(std::ostream* out, int epoch, int epochs, int64_t steps)
      : out_(out),
        epoch_(epoch),
        epochs_(epochs),
        steps_(steps),
        interactive_(out != nullptr && isatty(STDOUT_FILENO)),
        start_(std::chrono::steady_clock::now()),
        last_(start_) {}

  void Step(int64_t step, int64_t samples, double loss) {
    if (!interactive_) return;
    const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
    if (step + 1 < steps_ && now - last_ < std::chrono::milliseconds(250)) {
      return;
    }
    last_ = now;
    Draw(step + 1, samples, loss, "\r");
  }
  void Finish(int64_t samples, double loss) {
    if (out_ == nullptr) return;
    Draw(steps_, samples, loss, interactive_ ? "\r" : "");
    *out_ << "\n" << std::flush;
  }

 private:
  void Draw(int64_t done, int64_t samples, double loss, const char* prefix) {
    constexpr int kWidth = 30;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(steps_, 1));
    char line[256];
    std::snprintf(line, sizeof(line), "%sepoch %d/%d [%s%s] %3d%% %7.0f samples/s loss %.4f",
                  prefix, epoch_, epochs_, std::string(filled, '#').c_str(),
                  std::string(kWidth - filled, '.').c_str(),
                  static_cast<int>(100 * done / std::max<int64_t>(steps_, 1)),
                  secs > 0 ? samples / secs : 0.0, loss);
    *out_ << line << std::flush;
  }

  std::ostream* out_;
  int epoch_, epochs_;
  int64_t steps_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace fmnist

#endif  // GEEPS_EXAMPLES_FASHION_MNIST_PROGRESS_BAR_H_
