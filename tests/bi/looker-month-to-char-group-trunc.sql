-- tool: Looker, a month dimension: TO_CHAR of the DATE_TRUNC in SELECT, the DATE_TRUNC in GROUP BY
-- source: the BI probe of 2026-11-28 (a function of the keys, computed on the released keys)
-- identifiers: the demo's visits.visited_at and cost
-- expect: answered
SELECT
    TO_CHAR(DATE_TRUNC('month', visits.visited_at ), 'YYYY-MM') AS "visits.visited_month",
    COALESCE(SUM(visits.cost ), 0) AS "visits.total_cost"
FROM public.visits  AS visits
GROUP BY
    (DATE_TRUNC('month', visits.visited_at ))
ORDER BY
    1 DESC
LIMIT 500
