// Seeds for randomised tests: DT_TEST_SEED=N (any unsigned integer) makes every random switch
// test draw new cases, so nightly-size runs explore beyond the fixed default; unset, the
// defaults keep CI reproducible. Tests print the seed with each failure ("DT_TEST_SEED=N")
// so a failing draw can be replayed exactly.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace dynatrain::testing {

// The seed for a test whose fixed seed is `fallback`: fallback unset, else fallback mixed with
// DT_TEST_SEED (so tests seeded differently stay different under one DT_TEST_SEED).
inline std::uint32_t test_seed(std::uint32_t fallback) {
  const char* env = std::getenv("DT_TEST_SEED");
  if (!env || !*env) return fallback;
  const auto seed = static_cast<std::uint32_t>(std::strtoull(env, nullptr, 10));
  return fallback * 2654435761u ^ (seed + 0x9e3779b9u);
}

// "DT_TEST_SEED=N" (or "DT_TEST_SEED unset") for failure messages.
inline std::string seed_note() {
  const char* env = std::getenv("DT_TEST_SEED");
  return env && *env ? std::string("DT_TEST_SEED=") + env : std::string("DT_TEST_SEED unset");
}

}  // namespace dynatrain::testing
