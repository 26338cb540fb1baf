-- tool: analyst SQL (psql, a notebook), a list as an array: = ANY(ARRAY[...]), as psycopg's list parameter arrives
-- source: the 2026-11-29 review's smaller refusals (= ANY(ARRAY[...]))
-- identifiers: the demo's visits
-- expect: answered
SELECT department, COUNT(*) AS visits, AVG(cost) AS avg_cost FROM visits WHERE department = ANY(ARRAY['cardiology', 'oncology']) GROUP BY department
