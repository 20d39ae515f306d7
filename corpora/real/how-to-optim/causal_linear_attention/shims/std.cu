// kernel-skills prelude (project code): the standard header torch/extension.h brought in
// (the kernel spells uint32_t).
#include <cstdint>
