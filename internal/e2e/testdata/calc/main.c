#include <stdio.h>
#include <stdlib.h>
#include "calc.h"

int main(int argc, char **argv) {
	long a = argc > 1 ? atol(argv[1]) : 3;
	int e = argc > 2 ? atoi(argv[2]) : 4;
	printf("%ld+%d=%ld %ld*%d=%ld %ld^%d=%ld\n", a, e, add(a, e), a, e, mul(a, e), a, e, power(a, e));
	return 0;
}
