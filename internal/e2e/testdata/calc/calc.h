/* calc: a tiny program built by nodemgr's remote make test, one task per file. */
#ifndef CALC_H
#define CALC_H
long add(long a, long b);
long mul(long a, long b);
long power(long base, int exp);
#endif
