// sim/cluster.h: presets round-trip through JSON, and bad descriptions name the problem.
#include <gtest/gtest.h>

#include "common/error.h"
#include "sim/cluster.h"

namespace dynatrain::sim {
namespace {

TEST(Cluster, PresetsRoundTripThroughJson) {
  for (const auto& name : cluster_presets()) {
    const Cluster c = cluster_from_spec(name);
    EXPECT_EQ(c.name, name);
    EXPECT_NO_THROW(c.validate());
    const Cluster back = cluster_from_json(to_json(c), "round trip");
    EXPECT_EQ(to_json(back), to_json(c)) << name;
  }
  const Cluster four = cluster_from_spec("a800-16x8-4nic");
  EXPECT_EQ(four.gpus_per_nic(), 2);
  EXPECT_DOUBLE_EQ(four.bandwidth().inter_node, 12.5e9);  // a NIC shared by two GPUs
  EXPECT_DOUBLE_EQ(cluster_from_spec("a800-16x8").bandwidth().inter_node, 25e9);
  const Cluster here = cluster_from_spec("this-machine");
  EXPECT_GT(here.copy, 1e8);
  EXPECT_EQ(here.topology(6).gpus_per_node, 6);  // one node holds every process
}

TEST(Cluster, BadDescriptionsNameTheProblem) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { cluster_from_spec("tpu-pod"); }).find("valid: a800-16x8, a800-16x8-4nic"), std::string::npos);
  auto j = to_json(cluster_from_spec("a800-16x8"));
  j["nic_gbps"] = 25;
  EXPECT_NE(message([&] { cluster_from_json(j, "f.json"); }).find("unknown field \"nic_gbps\""), std::string::npos);
  j = to_json(cluster_from_spec("a800-16x8"));
  j.erase("pcie_gb_per_s");
  EXPECT_NE(message([&] { cluster_from_json(j, "f.json"); }).find("lacks field \"pcie_gb_per_s\""), std::string::npos);
  j = to_json(cluster_from_spec("a800-16x8"));
  j["nics_per_node"] = 3;
  EXPECT_NE(message([&] { cluster_from_json(j, "f.json"); }).find("nics_per_node 3"), std::string::npos);
  j["nics_per_node"] = 8;
  j["nic_gb_per_s"] = 0;
  EXPECT_NE(message([&] { cluster_from_json(j, "f.json"); }).find("nic_gb_per_s must be positive"), std::string::npos);
}

}  // namespace
}  // namespace dynatrain::sim
