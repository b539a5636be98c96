// Host tests of the GPU test harness (harness.h; no GPU needed, so CI runs them): the case ID
// format, seeds, and the DSV4_CASE selection that reproduces one case.
#include <doctest/doctest.h>

#include <string>

#include "cuda/tests/harness.h"

using dsv4::cuda::Variant;
using dsv4::cuda::testing::base_seed;
using dsv4::cuda::testing::Case;
using dsv4::cuda::testing::case_seed;
using dsv4::cuda::testing::CaseId;
using dsv4::cuda::testing::Tally;
using dsv4::cuda::testing::TallyBook;

TEST_CASE("a case ID lists its parameters in order, ggml-style") {
  const CaseId id = CaseId("c4_prefill")
                        .with("d", 512)
                        .with("lengths", std::vector<int64_t>{37, 5})
                        .with("variant", Variant::v3)
                        .with("online", false);
  CHECK(id.str() == "c4_prefill(d=512,lengths=[37,5],variant=v3,online=no)");
  CHECK(CaseId("op").str() == "op()");
}

TEST_CASE("a case's seed comes from the base seed and its ID, and is written into the ID") {
  const CaseId a = CaseId("op").with("d", 128), b = CaseId("op").with("d", 512);
  const auto ca = Case::select(a, nullptr), cb = Case::select(b, nullptr);
  REQUIRE(ca);
  REQUIRE(cb);
  CHECK(ca->seed() == case_seed(base_seed(), "op(d=128)"));
  CHECK(ca->seed() != cb->seed());
  CHECK(ca->id() == "op(d=128,seed=" + std::to_string(ca->seed()) + ")");
  CHECK(Case::select(CaseId("op"), nullptr)->id() == "op(seed=" + std::to_string(case_seed(base_seed(), "op()")) + ")");
  CHECK(case_seed(1, "op(d=128)") != case_seed(2, "op(d=128)"));
}

TEST_CASE("DSV4_CASE runs the case it names, with the seed it names, and no other") {
  const CaseId id = CaseId("c4_prefill").with("lengths", std::vector<int64_t>{37, 5}).with("variant", Variant::v3);
  const auto same = Case::select(id, "c4_prefill(lengths=[37,5],variant=v3,seed=123)");
  REQUIRE(same);
  CHECK(same->seed() == 123);
  CHECK(same->id() == "c4_prefill(lengths=[37,5],variant=v3,seed=123)");
  CHECK(same->rng()() == std::mt19937_64(123)());
  CHECK_FALSE(Case::select(id, "c4_prefill(lengths=[37,5],variant=v2,seed=123)"));
  CHECK_FALSE(Case::select(id, "c4_prefill(lengths=[37],variant=v3,seed=123)"));
  const auto empty = Case::select(CaseId("op"), "op(seed=7)");
  REQUIRE(empty);
  CHECK(empty->seed() == 7);
  CHECK(Case::select(id, "")->seed() == Case::select(id, nullptr)->seed());  // empty = unset
}

TEST_CASE("tallies count differences, bound violations and the worst ratio, per version") {
  Tally t;
  t.bitwise(true);
  t.bitwise(false);
  t.bounded(0.5, 1.0);
  t.bounded(-3.0, 1.0);
  t.bounded(0.0, 1.0);
  CHECK(t.compared == 5);
  CHECK(t.differing == 3);
  CHECK(t.over_bound == 1);
  CHECK(t.worst_ratio == 3.0);
  TallyBook book;
  book.at(Variant::v1, "entries") += t;
  book.at(Variant::v1, "entries") += t;
  book.at("v3", "entries").bitwise(true);
  CHECK(book.at("v1", "entries").compared == 10);
  CHECK(book.at(Variant::v3, "entries").compared == 1);
  const std::string table = book.table();
  CHECK(table.find("v1") < table.find("v3"));
}
