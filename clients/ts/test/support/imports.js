// What the tests import: the package's exports, and its SSE reader.
export * from "../../src/index.js";
export { SseReader as SseReaderForTests } from "../../src/stream.js";
