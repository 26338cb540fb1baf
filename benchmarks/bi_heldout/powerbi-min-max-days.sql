-- tool: Power BI, DirectQuery: table, Min and Max of days by department
-- chart: table
-- keys: 1
-- why: MIN and MAX in the nested form
-- expect: answered
select "_"."department", "_"."a0", "_"."a1"
from 
(
    select "rows"."department" as "department",
        min("rows"."days") as "a0",
        max("rows"."days") as "a1"
    from 
    (
        select "_"."department", "_"."days"
        from "public"."visits" "_"
    ) "rows"
    group by "department"
) "_"
where not "_"."a0" is null
limit 1000001
