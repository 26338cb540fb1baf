// The proxy through pgJDBC, as DBeaver, Metabase and Tableau use it. Prints one
// "key=value" line per check; tests/wire/test_clients.py reads them.
import java.sql.*;

public class JdbcClient {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/demo?user=alice&sslmode=disable";
        try (Connection con = DriverManager.getConnection(url)) {
            try (Statement st = con.createStatement();
                 ResultSet rs = st.executeQuery("SELECT MEDIAN(income) AS m FROM people")) {
                rs.next();
                System.out.println("median=" + rs.getDouble(1));
                SQLWarning warning = st.getWarnings();
                System.out.println("notice=" + (warning == null ? "" : warning.getMessage()));
            }
            try (Statement st = con.createStatement();
                 ResultSet rs = st.executeQuery(
                     "SELECT region, COUNT(*) AS n FROM people GROUP BY region")) {
                long total = 0;
                int groups = 0;
                while (rs.next()) { total += rs.getLong("n"); groups++; }
                System.out.println("groups=" + groups);
                System.out.println("total=" + total);
            }
            try (PreparedStatement ps = con.prepareStatement(
                     "SELECT COUNT(*) FROM people WHERE age BETWEEN ? AND ?")) {
                for (int i = 0; i < 6; i++) {  // past prepareThreshold: a named statement
                    ps.setInt(1, 30);
                    ps.setInt(2, 50);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        System.out.println("count=" + rs.getLong(1));
                    }
                }
            }
            try (ResultSet rs = con.getMetaData().getTables(null, "public", "%",
                                                             new String[] {"TABLE"})) {
                StringBuilder names = new StringBuilder();
                while (rs.next()) names.append(rs.getString("TABLE_NAME")).append(",");
                System.out.println("tables=" + names);
            }
            try (ResultSet rs = con.getMetaData().getColumns(null, "public", "people", "%")) {
                StringBuilder names = new StringBuilder();
                while (rs.next()) names.append(rs.getString("COLUMN_NAME")).append(",");
                System.out.println("columns=" + names);
            }
            try (Statement st = con.createStatement()) {
                st.executeQuery("SELECT * FROM people");
                System.out.println("refused=none");
            } catch (SQLException e) {
                System.out.println("refused=" + e.getSQLState());
            }
        }
    }
}
