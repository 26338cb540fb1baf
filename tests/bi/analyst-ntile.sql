-- tool: analyst SQL (psql), quartiles of the departments by their total cost
-- source: issue 33 ("NTILE")
-- identifiers: the demo's visits.department and cost
-- expect: answered
SELECT department, SUM(cost) AS total, NTILE(4) OVER (ORDER BY SUM(cost) DESC) AS quartile FROM visits GROUP BY department
