#pragma once

// The main() of a benchmark whose cases are registered at run time (from the streams it
// loads): Google Benchmark's own flags, then `register_all()`, which returns false to stop
// with exit status 1 (a bad setting it has reported), then the run.

#include <benchmark/benchmark.h>

namespace ngramspec::bench {

template <class Register>
int run_benchmarks(int argc, char** argv, const Register& register_all) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!register_all()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace ngramspec::bench
