-- tool: Looker, a date dimension filtered to 'is in the past 7 days' from a fixed day ((7 || ' day')::INTERVAL)
-- source: the BI probe of 2026-11-28 (constant folding)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT
    DATE(visits.visited_at ) AS "visits.visited_date",
    COUNT(*) AS "visits.count"
FROM public.visits  AS visits
WHERE ((( visits.visited_at  ) >= ((TIMESTAMP '2024-06-01')) AND ( visits.visited_at  ) < ((TIMESTAMP '2024-06-01' + (7 || ' day')::INTERVAL))))
GROUP BY
    (DATE(visits.visited_at ))
ORDER BY
    1 DESC
FETCH NEXT 500 ROWS ONLY
