/*
 * pyjson.c - a Python workload for tools/bench/real_programs.sh: CPython embedded through
 * libpython, building DICTS small dicts and serialising them with json.dumps, so utrace traces
 * the interpreter with --nest-lib 'libpython*'.
 *
 * Usage: pyjson [DICTS]   (default 2000; prints "pyjson: LENGTH")
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
int main(int argc, char **argv)
{
	int dicts = argc > 1 ? atoi(argv[1]) : 2000;
	char code[256];
	snprintf(code, sizeof code,
		 "import json\nd = [{'a': i, 'b': str(i)} for i in range(%d)]\n"
		 "print('pyjson:', len(json.dumps(d)))\n", dicts);
	Py_Initialize();
	int failed = PyRun_SimpleString(code);
	return Py_FinalizeEx() < 0 || failed ? 1 : 0;
}
