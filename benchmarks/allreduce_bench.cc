// The baseline users would pick instead of a parameter server: plain data
// parallelism with MPI_Allreduce of all gradients every iteration, no
// overlap of communication with compute. Same emulated workload as
// scale_bench (which starts this with mpirun and reads its RESULT line):
// `--params` floats in `--tables` tables, a sleep of `--compute-ms` per
// iteration standing in for the GPU, then one allreduce per table and the
// update applied on every rank.
//   mpirun -np N allreduce_bench [--params 2000000] [--tables 4]
//          [--compute-ms 200] [--iterations 20]
// `scale_bench --netns` runs it with each rank in a network namespace of
// its own (mpirun's daemons started there by scale_bench as its rsh agent,
// TCP between ranks over the rate-limited links). Each rank also prints its
// CPU per iteration (CPUTIME; MACHINECPU from rank 0: benchmarks/timeline.h).
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "flags.h"
#include "timeline.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  uint64_t params = 2000000;
  int tables = 4, iterations = 20;
  double compute_ms = 200;
  geeps::bench::Flags flags("allreduce_bench");
  flags.Add("--params", &params, "parameters (floats) of the model")
      .Add("--tables", &tables, "tables the parameters are split over")
      .Add("--compute-ms", &compute_ms, "emulated compute per iteration")
      .Add("--iterations", &iterations, "timed iterations")
      .IgnoreUnknown();  // scale_bench's other common arguments (--slack, ...)
  if (const int status = flags.Parse(argc, argv); status >= 0) {
    MPI_Finalize();
    return status;
  }
  if (tables < 1 || iterations < 1 || compute_ms < 0) {
    const int status = flags.Fail("--tables and --iterations must be >= 1, --compute-ms >= 0");
    MPI_Finalize();
    return status;
  }
  constexpr unsigned long long kWidth = 1024;  // as scale_bench: whole rows
  unsigned long long rows = params / tables / kWidth;
  if (rows == 0) rows = 1;
  const size_t n = static_cast<size_t>(rows * kWidth);
  std::vector<std::vector<float>> weights(tables, std::vector<float>(n, 0.0f));
  std::vector<float> grad(n), sum(n);
  const int warm = 3;
  const float lr = 1.0f / static_cast<float>(size);
  std::chrono::steady_clock::time_point start;
  geeps::bench::CpuTime cpu0;
  geeps::bench::MachineCpu machine0;
  for (int it = 0; it < warm + iterations; ++it) {
    if (it == warm) {
      MPI_Barrier(MPI_COMM_WORLD);
      start = std::chrono::steady_clock::now();
      cpu0 = geeps::bench::CpuTime::Now();
      machine0 = geeps::bench::MachineCpu::Now();
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<long long>(compute_ms * 1000)));
    for (int t = 0; t < tables; ++t) {
      std::fill(grad.begin(), grad.end(), 1.0f);
      MPI_Allreduce(grad.data(), sum.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      float* w = weights[t].data();
      for (size_t k = 0; k < n; ++k) w[k] += lr * sum[k];
    }
  }
  const double per =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  // Each rank's CPU per iteration, as scale_bench's ranks report theirs.
  geeps::bench::PrintCpu(cpu0, machine0, rank == 0, iterations);
  std::fflush(stdout);
  double worst = 0;
  MPI_Reduce(&per, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) std::printf("RESULT %.9f\n", worst);
  MPI_Finalize();
  return 0;
}
