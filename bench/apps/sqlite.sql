-- bench/apps: sqlite3 :memory: building, indexing, updating and deleting 200k rows
CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INTEGER, c TEXT);
WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r WHERE i < 200000)
INSERT INTO t SELECT i, hex(randomblob(16 + (i % 40))), abs(random()) % 1000, printf('row-%d-%s', i, hex(randomblob(4))) FROM r;
CREATE INDEX ta ON t(a);
CREATE INDEX tb ON t(b, c);
SELECT b, count(*), max(length(a)) FROM t GROUP BY b ORDER BY 2 DESC LIMIT 3;
UPDATE t SET c = c || a WHERE b < 500;
DELETE FROM t WHERE b % 3 = 0;
SELECT count(*), sum(length(c)) FROM t;
