/*
** Compatibility include: the audit trail moved to src/audit/ (below the
** keystores, which call it, and below src/keys/).  New code includes
** "audit/audit.h"; this file only keeps older includes building.
*/
#include "audit/audit.h"
