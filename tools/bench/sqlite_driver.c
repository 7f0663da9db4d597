/*
 * sqlite_driver.c - a SQLite workload for tools/bench/real_programs.sh: ROWS rows inserted into
 * an in-memory table with an index, then 100 range queries. Built with the amalgamation the
 * libsqlite3-sys crate bundles, into one binary both utrace and `uftrace record -P .` trace.
 *
 * Usage: sqlite_driver [ROWS]   (default 2000; prints "sqlite: ROWS rows, checksum S")
 */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static void exec(sqlite3 *db, const char *sql)
{
	char *error = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &error) != SQLITE_OK) {
		fprintf(stderr, "%s: %s\n", sql, error);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int rows = argc > 1 ? atoi(argv[1]) : 2000;
	sqlite3 *db;
	sqlite3_stmt *insert, *select;
	long sum = 0;

	sqlite3_open(":memory:", &db);
	exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, value INTEGER)");
	exec(db, "CREATE INDEX t_value ON t(value)");
	sqlite3_prepare_v2(db, "INSERT INTO t(name, value) VALUES (?, ?)", -1, &insert, NULL);
	exec(db, "BEGIN");
	for (int i = 0; i < rows; i++) {
		char name[32];
		snprintf(name, sizeof name, "row-%d", i * 7919 % rows);
		sqlite3_bind_text(insert, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(insert, 2, i * 31 % 1000);
		sqlite3_step(insert);
		sqlite3_reset(insert);
	}
	exec(db, "COMMIT");
	sqlite3_prepare_v2(db, "SELECT count(*), sum(length(name)) FROM t WHERE value BETWEEN ? AND ?", -1, &select, NULL);
	for (int i = 0; i < 100; i++) {
		sqlite3_bind_int(select, 1, i * 10);
		sqlite3_bind_int(select, 2, i * 10 + 50);
		while (sqlite3_step(select) == SQLITE_ROW)
			sum += sqlite3_column_int(select, 0) + sqlite3_column_int(select, 1);
		sqlite3_reset(select);
	}
	sqlite3_finalize(insert);
	sqlite3_finalize(select);
	sqlite3_close(db);
	printf("sqlite: %d rows, checksum %ld\n", rows, sum);
	return 0;
}
