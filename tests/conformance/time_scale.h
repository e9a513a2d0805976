// Wall-clock bounds of the tests, scaled by one factor: DLPG_TEST_TIME_SCALE from the
// environment (ci/sanitize.sh sets it for the slower instrumented build), else 1. The bounds
// are written generously for a loaded machine already; the factor is for builds that run
// slower. Every fixed upper bound on elapsed time in tests/ goes through Scaled(); lower
// bounds ("did not give up before its timeout") do not, since slowness cannot break them.
// Shared by the conformance harness and the unit tests (header only: no link dependency).
#pragma once

#include <stdlib.h>

inline double TimeScale() {
  static const double scale = [] {
    const char *v = getenv("DLPG_TEST_TIME_SCALE");
    double f = v && *v ? atof(v) : 1.0;
    return f > 0 ? f : 1.0;
  }();
  return scale;
}

// seconds * TimeScale().
inline double Scaled(double seconds) { return seconds * TimeScale(); }
