// A step abandoned midway: the forward and backward check TrainerOptions::interrupt between
// layers (model.cc, interruption_point) and throw StepInterrupted once another thread raised it
// (job/loss_watch.h: another process met a lost peer). Torch-free.
#pragma once

#include "common/error.h"

namespace dynatrain::train {

// A CommError, as the collective that meets a lost peer throws: the step's update was not
// applied, and the caller recovers as from that collective's error.
class StepInterrupted : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace dynatrain::train
