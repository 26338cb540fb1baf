-- tool: analyst-written SQL: two protected tables joined USING their privacy unit, the
--   merged column named unqualified
-- source: issue 33 ("JOIN … USING (col)")
-- identifiers: the demo's visits and people, both with privacy_unit person_id
-- expect: answered
SELECT region, COUNT(DISTINCT person_id), SUM(cost) FROM visits JOIN people USING (person_id) GROUP BY region
