"""The image back ends of ``image_utils``, as nnabla names them: ``common`` holds
the pixel rescaling and argument checks every back end shares, ``pil_backend`` the
one dpnb has, on Pillow."""
