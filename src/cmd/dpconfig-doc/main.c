/* Prints docs/config.md from the key table: `build/tests/dpconfig_doc > docs/config.md`.
 * CTest compares the committed file with this output, so the docs cannot drift. */
#include <stdio.h>

#include "dpconfig/dpconfig.h"

int main(void)
{
    dpconfig_print_doc(stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}
