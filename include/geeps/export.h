// GEEPS_EXPORT marks the public API declared in include/geeps: what
// libgeeps.so exports. The library's version script (src/libgeeps.map)
// exports exactly these names and keeps every other symbol (the internals
// under src/) local to the library; the project's own tests, tools and
// benchmarks reach the internals through a second library built from the
// same objects (geeps_internal, not installed). A new public class or
// function gets the macro here and a line in the map.
#ifndef GEEPS_EXPORT_H_
#define GEEPS_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define GEEPS_EXPORT [[gnu::visibility("default")]]
#else
#define GEEPS_EXPORT
#endif

#endif  // GEEPS_EXPORT_H_
