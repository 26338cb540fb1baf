-- tool: Power BI, DirectQuery: clustered bar chart, Sum of cost by department
-- chart: bar chart
-- keys: 1
-- why: the folded nested form with the "rows" subquery and NOT … IS NULL filter
-- expect: answered
select "_"."department", "_"."a0"
from 
(
    select "rows"."department" as "department",
        sum("rows"."cost") as "a0"
    from 
    (
        select "_"."department", "_"."cost"
        from "public"."visits" "_"
    ) "rows"
    group by "department"
) "_"
where not "_"."a0" is null
limit 1000001
