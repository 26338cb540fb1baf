-- tool: Power BI, DirectQuery: column chart, Count of visit_id by Year (Date.Year folded)
-- chart: column chart
-- keys: 1
-- why: date_part('year', …) in the source subquery as the key
-- expect: answered
select "_"."Year", "_"."a0"
from 
(
    select "rows"."Year" as "Year",
        count("rows"."visit_id") as "a0"
    from 
    (
        select "_"."visit_id", date_part('year', "_"."visited_at") as "Year"
        from "public"."visits" "_"
    ) "rows"
    group by "Year"
) "_"
where not "_"."a0" is null
limit 1000001
