#!/bin/sh
# Doxygen input filter for the spec pages (FILTER_PATTERNS in Doxyfile.in): `md_filter.sh PAGE.md`
# prints the page for Doxygen on stdout.
#
# The pages are plain Markdown so that they read well on a code host, where Doxygen commands
# (\ref, \subpage, {#label}) would show as raw text. Doxygen 1.9 resolves links to whole pages
# ([text](layout.md)) and to anchors of the same page ([text](#anchor)) by itself; this filter
# rewrites the rest:
#   - "# Title" on the first line becomes "# Title {#page}", so each page keeps a stable name
#     (index.md is the main page and needs none);
#   - [text](page.md#anchor) becomes [text](#anchor): Doxygen looks anchors up across pages;
#   - [`text`](include/dsv4kv/spec/HEADER.hpp#symbol) becomes a \ref to the symbol (namespace
#     dsv4kv::spec for layout, numerics and semantics, dsv4kv for the others), and
#     [`text`](include/dsv4kv/spec/HEADER.hpp) a \ref to the header's page;
#   - a link to a file outside the site (../conformance/..., ../README.md) keeps only its text;
#   - <!-- toc --> becomes \tableofcontents;
#   - a title starting with the word dsv4kv gets %dsv4kv (no autolink to the namespace in a title).
# A target Doxygen cannot resolve is reported as a warning by the docs build, which must have none.
page=$(basename "$1" .md)
label=" {#$page}"
[ "$page" = index ] && label=""
sed -E \
  -e "1s/^(# .*)\$/\\1$label/" \
  -e '1s/^# dsv4kv\b/# %dsv4kv/' \
  -e 's/<!-- toc -->/\\tableofcontents/' \
  -e 's/\]\([a-z_]+\.md#([A-Za-z0-9_]+)\)/](#\1)/g' \
  -e 's/\[`([^`]*)`\]\(include\/dsv4kv\/spec\/(layout|numerics|semantics)\.hpp#([A-Za-z0-9_:]+)\)/<code>\\ref dsv4kv::spec::\3 "\1"<\/code>/g' \
  -e 's/\[`([^`]*)`\]\(include\/dsv4kv\/spec\/[a-z]+\.hpp#([A-Za-z0-9_:]+)\)/<code>\\ref dsv4kv::\2 "\1"<\/code>/g' \
  -e 's/\[`([^`]*)`\]\(include\/dsv4kv\/spec\/([a-z]+\.hpp)\)/<code>\\ref \2 "\1"<\/code>/g' \
  -e 's/\[([^]]*)\]\(\.\.\/[^)]*\)/\1/g' \
  "$1"
