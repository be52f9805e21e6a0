#ifndef JOBCTL_CYAML_SHIM_H
#define JOBCTL_CYAML_SHIM_H
#include <yaml.h>
#endif
