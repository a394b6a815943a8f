#!/usr/bin/env python3
"""Check the built Doxygen site for what a reader would see broken.

usage: scripts/check_docs.py [HTML_DIR]

HTML_DIR is the folder `cmake --build <build> --target docs` writes (<build>/docs/html;
default: build-ci/docs/html, else build/docs/html). Three kinds of defect, each listed as
file:line and the text around it, and the exit status is 1 if there is any:

  tt        a literal <tt> or </tt> shown as text: Doxygen 1.9 writes a code span in a
            Markdown heading as <tt>, then escapes it (a heading needs plain words or an
            explicit HTML tag instead).
  backtick  a ` in rendered prose (anything outside code, pre, tt, kbd and source
            fragments): a code span Markdown did not recognise, e.g. inside "double
            quotes", across a ** pair or unbalanced.
  empty     a link from the front page (index.html) or the course index page to a
            "File Reference" page with nothing on it, which Doxygen makes for every .md
            file and links when a file name appears in the text; link the page itself,
            [text](path/to/page.md), instead.

Pages of source listings (*_source.html) are code and are not read.
"""
import html
import html.parser
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CODE_TAGS = {"code", "pre", "tt", "kbd", "samp", "script", "style"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
HOME_PAGES = ["index.html", "md_docs_index.html"]


class Page(html.parser.HTMLParser):
    """One HTML page: its visible text outside code, with line numbers, its links, its title
    and the text of its div.contents."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, is_code): is_code says the element or one around it is code
        self.prose = []  # (line, text) outside code
        self.links = []  # (line, href, link text)
        self.title = ""
        self.contents_text = []  # text inside div.contents, after the page title
        self._in_title = False
        self._contents_depth = None  # stack depth of div.contents while inside it
        self._link = None

    def _code(self):
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        is_code = self._code() or tag in CODE_TAGS or (tag == "div" and ("fragment" in classes or "line" in classes))
        if tag in VOID_TAGS:
            return
        self.stack.append((tag, is_code))
        if tag == "title":
            self._in_title = True
        if tag == "div" and "contents" in classes and self._contents_depth is None:
            self._contents_depth = len(self.stack)
        if tag == "a" and a.get("href"):
            self._link = [self.getpos()[0], a["href"], ""]

    def handle_endtag(self, tag):
        if tag in VOID_TAGS:
            return
        # Pop to the matching tag (Doxygen's HTML is well formed; be lenient anyway).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                if self._contents_depth is not None and i + 1 <= self._contents_depth:
                    self._contents_depth = None
                del self.stack[i:]
                break
        if tag == "title":
            self._in_title = False
        if tag == "a" and self._link is not None:
            self.links.append(tuple(self._link))
            self._link = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
            return
        if self._link is not None:
            self._link[2] += data
        if self._contents_depth is not None:
            self.contents_text.append(data)
        if not self._code():
            self.prose.append((self.getpos()[0], data))


def read(path):
    page = Page()
    page.feed(path.read_text(errors="replace"))
    page.close()
    return page


def snippet(text, at, width=50):
    s = " ".join(text[max(0, at - width):at + width].split())
    return s


def check(html_dir):
    problems = []
    pages = sorted(p for p in html_dir.glob("*.html") if not p.name.endswith("_source.html"))
    parsed = {}
    for path in pages:
        page = parsed[path.name] = read(path)
        for line, text in page.prose:  # one report per kind and piece of text
            at = min((i for i in (text.find("<tt>"), text.find("</tt>")) if i >= 0), default=-1)
            if at >= 0:
                problems.append((path.name, line, "tt", snippet(text, at)))
            if "`" in text:
                problems.append((path.name, line, "backtick", snippet(text, text.find("`"))))
    for home in HOME_PAGES:
        page = parsed.get(home)
        if page is None:
            continue
        for line, href, text in page.links:
            target = href.split("#")[0]
            if not target or "/" in target or target not in parsed:
                continue
            t = parsed[target]
            if "File Reference" in t.title:
                body = " ".join("".join(t.contents_text).split())
                if not body:
                    problems.append((home, line, "empty", f'"{text}" links to {target}, an empty File Reference page'))
    return len(pages), problems


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help")):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    if len(sys.argv) == 2:
        html_dir = pathlib.Path(sys.argv[1])
    else:
        html_dir = next((d for d in (ROOT / "build-ci/docs/html", ROOT / "build/docs/html") if d.is_dir()),
                        ROOT / "build-ci/docs/html")
    if not (html_dir / "index.html").is_file():
        print(f"[check_docs] no built site in {html_dir} (build it: cmake --build <build> --target docs)")
        return 2
    count, problems = check(html_dir)
    for name, line, kind, text in problems:
        print(f"{name}:{line}: {kind}: {html.unescape(text)}")
    kinds = {}
    for p in problems:
        kinds[p[2]] = kinds.get(p[2], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no problems"
    status = "FAILED" if problems else "ok"
    print(f"[check_docs] {status}: {count} pages of {html_dir}: {summary}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
