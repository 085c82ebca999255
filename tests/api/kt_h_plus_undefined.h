/* kt.h plus one declaration that no library defines: kt_api_symbols_can_fail checks that the symbol check notices. */
#include "kt.h"

KT_API kt_status kt_declared_but_never_defined(void);
