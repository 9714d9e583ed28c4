// Convenience header: the whole public API of libgeeps.
#ifndef GEEPS_GEEPS_ALL_H_
#define GEEPS_GEEPS_ALL_H_

#include "geeps/config.h"
#include "geeps/embedded_cluster.h"
#include "geeps/export.h"
#include "geeps/geeps.h"
#include "geeps/process.h"
#include "geeps/stats.h"
#include "geeps/status.h"
#include "geeps/step.h"

#endif  // GEEPS_GEEPS_ALL_H_
