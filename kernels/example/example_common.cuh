// Shared by the example modules: the block size the host launches with.
#pragma once

#define EXAMPLE_BLOCK 256
