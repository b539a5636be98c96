#include "verify/report/diagnosis.h"

#include <fmt/format.h>

namespace dsv4::verify {

namespace {

// The trials after the best one that got exactly the same counts (the variants coincide here).
std::string same_as_best(const std::vector<VariantTrial>& trials) {
  std::string names;
  for (size_t i = 1; i < trials.size(); ++i) {
    const VariantTrial& t = trials[i];
    if (t.differing != trials[0].differing || t.explained != trials[0].explained) break;
    names += (names.empty() ? "" : ", ") + t.mutation;
  }
  return names.empty() ? "" : fmt::format(" (as does {}: identical at these dims and inputs)", names);
}

}  // namespace

std::string Diagnosis::summary() const {
  if (oracle_differing == 0)
    return fmt::format(
        "stage-locally (call {}) the oracle reproduces all {} captured {} bitwise: the difference "
        "comes from this stage's inputs",
        call, compared, unit);
  if (trials.empty())
    return fmt::format("{} of {} {} differ from the oracle's; no numerics variant applies to this stage",
                       oracle_differing, compared, unit);
  const VariantTrial& best = trials.front();
  if (best.reproduces())
    return fmt::format("matches {} ({}) bitwise: {} of {} differing {} explained{}", best.mutation, best.describe,
                       best.explained, oracle_differing, unit, same_as_best(trials));
  if (best.differing < oracle_differing)
    return fmt::format("closest: {} ({}): explains {} of {} differing {}, {} still differ ({} newly){}", best.mutation,
                       best.describe, best.explained, oracle_differing, unit, best.differing, best.introduced,
                       same_as_best(trials));
  return fmt::format("no variant reproduces it: {} of {} {} differ from the oracle's; the closest, {}, leaves {}",
                     oracle_differing, compared, unit, best.mutation, best.differing);
}

}  // namespace dsv4::verify
