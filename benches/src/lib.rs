//! prox-benches: criterion benchmarks and peer-comparison scripts.
