#include "calc.h"

long mul(long a, long b) {
	long r = 0;
	for (long i = 0; i < b; i++)
		r = add(r, a);
	return r;
}
