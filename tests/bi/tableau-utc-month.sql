-- tool: Tableau-style SQL (a month of a timestamp read as UTC), as issue 33 lists it
-- source: issue 33 ("date_trunc over ts::timestamptz AT TIME ZONE 'UTC'")
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT DATE_TRUNC( 'MONTH', CAST("visits"."visited_at" AS TIMESTAMP WITH TIME ZONE) AT TIME ZONE 'UTC' ) AS "tmn:visited_at:ok", COUNT(1) AS "cnt:visits:ok" FROM "public"."visits" "visits" GROUP BY 1
