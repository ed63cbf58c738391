"""lmstudy in the browser: ``python app.py [--host 127.0.0.1] [--port 7860]``.

A placeholder page until the control-code study ships its demo checkpoint (issue 4 builds the
side-by-side comparison of control-coded generations here). ``build_demo()`` returns the
``gr.Blocks`` so tests can import it; launching happens only under ``__main__``.
"""

from __future__ import annotations

import argparse

import gradio as gr


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="lmstudy") as demo:
        gr.Markdown(
            "# lmstudy\n"
            "A low-compute language-modelling workbench. The side-by-side comparison of "
            "control-coded generations arrives with the control-code study; until then, run a "
            "study with `python -m lmstudy study quickstart --scale smoke`."
        )
    return demo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="lmstudy Gradio app")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: localhost only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also create a public share link")
    args = parser.parse_args(argv)
    build_demo().launch(server_name=args.host, server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
