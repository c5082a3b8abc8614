// Everything of the exact reference in one include.
#pragma once
#include "attncheck/reference/ask.hpp"
#include "attncheck/reference/exact.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/fp8.hpp"
#include "attncheck/reference/precision.hpp"
#include "attncheck/reference/ulp.hpp"
