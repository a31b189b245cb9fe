// Fixture for the include-layer check: a public header including an internal one must be reported.
#include "record/encoded_record.h"
