// Vacating processes in a switch, the same for the CLI trainer (train/trainer_switch.cc) and an
// adopted PyTorch model (python/elastic.cc): which vacate lists are valid, and where the new
// layout's ranks go when processes must take none. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "edm/device_manager.h"

namespace dynatrain::edm {

// Why `vacate` is not a valid vacate list for a world of `world_size` ("" if it is): ranks
// outside 0..world_size-1 ("cannot vacate rank 7: valid ranks are 0..3"), or named twice.
std::string vacate_problem(const std::vector<int>& vacate, int world_size);

// The placement callback of a prepare that vacates `vacate` (DeviceManager::prepare): a
// `ranks`-rank layout placed around them on the transition world's processes (rank r stays on
// process r unless vacated; the others take the free processes in order, those a grow starts
// included: plan::place_around). Empty `vacate`: no callback (the caller's own placement rule).
DeviceManager::Place vacate_place(int ranks, const std::vector<int>& vacate);

// The same placement when no process can start (a world that only shrinks in place): the world
// process of each rank. InputError naming the list (vacate_problem) or, when the processes that
// stay are fewer than `ranks`, the counts.
std::vector<int> in_place_placement(int ranks, int world_size, const std::vector<int>& vacate);

}  // namespace dynatrain::edm
