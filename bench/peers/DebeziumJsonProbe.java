// A probe of the MongoDB Java driver's JSON writers, as Debezium's MongoDB connector 3.6.3 uses
// them (driver 5.9.2, on the machine's JDK), for what the real connector cannot be shown through
// SecantusDB (undefined, symbol and DBPointer values, which the server converts on insert) and
// for exhaustive tables (every BMP character, millions of doubles).
//
// Our own program: it calls the bson library's public API only. Which writer settings Debezium
// uses is not read from Debezium: capture_debezium.py infers them from the connector's records
// and checks that this probe reproduces every string the connector wrote, byte for byte.
//
// Run: java -cp bson-5.9.2.jar DebeziumJsonProbe.java MODE < input > output
//   escapes  no input; prints the BMP ranges the strict writer copies raw ("XXXX YYYY" hex,
//            inclusive), every other UTF-16 unit is escaped as \\uxxxx
//   doubles  input: one double per line as 16 hex digits of its bits; prints "bits text"
//            with text = Double.toString
//   docs     input: "name<TAB>base64 BSON document" per line; prints
//            "name<TAB>b64(strict)<TAB>b64(relaxed)<TAB>b64(compact relaxed)<TAB>b64(id)"
//            where id is the document's _id rendered as Debezium's key renders it (empty
//            when the document has no _id)
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.util.Base64;

import org.bson.BsonBinaryReader;
import org.bson.BsonDocument;
import org.bson.BsonString;
import org.bson.codecs.BsonDocumentCodec;
import org.bson.codecs.DecoderContext;
import org.bson.json.JsonMode;
import org.bson.json.JsonWriterSettings;

public class DebeziumJsonProbe {
    // Indented with empty indent and newline strings: `"k": v` and `,` with no space.
    static final JsonWriterSettings STRICT = JsonWriterSettings.builder()
            .outputMode(JsonMode.STRICT).indent(true).indentCharacters("").newLineCharacters("").build();
    static final JsonWriterSettings RELAXED = JsonWriterSettings.builder()
            .outputMode(JsonMode.RELAXED).indent(true).indentCharacters("").newLineCharacters("").build();
    // BsonDocument.toJson()'s default: relaxed, not indented: `"k": v` and `, `.
    static final JsonWriterSettings COMPACT = JsonWriterSettings.builder().outputMode(JsonMode.RELAXED).build();

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        switch (args[0]) {
            case "escapes" -> escapes(out);
            case "doubles" -> {
                for (String line; (line = in.readLine()) != null; ) {
                    line = line.trim();
                    if (line.isEmpty()) continue;
                    double d = Double.longBitsToDouble(Long.parseUnsignedLong(line, 16));
                    out.println(line + " " + Double.toString(d));
                }
            }
            case "docs" -> {
                Base64.Encoder b64 = Base64.getEncoder();
                for (String line; (line = in.readLine()) != null; ) {
                    String[] parts = line.split("\t");
                    byte[] bson = Base64.getDecoder().decode(parts[1]);
                    BsonDocument doc = new BsonDocumentCodec().decode(
                            new BsonBinaryReader(ByteBuffer.wrap(bson)), DecoderContext.builder().build());
                    String id = "";
                    if (doc.containsKey("_id")) {
                        String wrapped = new BsonDocument("_id", doc.get("_id")).toJson(RELAXED);
                        id = wrapped.substring("{\"_id\": ".length(), wrapped.length() - 1);
                    }
                    out.println(parts[0] + "\t" + enc(b64, doc.toJson(STRICT)) + "\t" + enc(b64, doc.toJson(RELAXED))
                            + "\t" + enc(b64, doc.toJson(COMPACT)) + "\t" + enc(b64, id));
                }
            }
            default -> throw new IllegalArgumentException("mode: escapes, doubles or docs");
        }
        out.flush();
    }

    static String enc(Base64.Encoder b64, String s) {
        return b64.encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    static void escapes(PrintStream out) {
        int start = -1;
        for (int c = 0; c <= 0x10000; c++) {
            boolean raw = false;
            if (c < 0x10000) {
                String json = new BsonDocument("s", new BsonString(String.valueOf((char) c))).toJson(STRICT);
                String value = json.substring("{\"s\": \"".length(), json.length() - 2);
                raw = value.length() == 1 && value.charAt(0) == (char) c;
            }
            if (raw && start < 0) start = c;
            if (!raw && start >= 0) {
                out.printf("%04X %04X%n", start, c - 1);
                start = -1;
            }
        }
    }
}
